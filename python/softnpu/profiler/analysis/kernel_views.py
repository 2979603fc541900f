"""kernel_details.csv, op_statistic.csv and api_statistic.csv: the device tasks one by one, per operator type, and the
runtime API calls of the host (Level1).

Columns are torch_npu's. What a software NPU fills and what it cannot:
  - Name is the kernel's (the ATen op it runs, "Memcpy HtoD", ...); Type the op without its namespace; Accelerator
    Core AI_CORE for kernels (they run on the device's compute threads, its "AI cores"), MEMCPY_ASYNC / MEMSET for
    copies and memsets; Stream ID the trace's stream id; Task ID the launch's correlation id;
  - Input Shapes / Data Types come from the launching op when record_shapes=True; formats are ND (softnpu keeps
    every tensor in ND); output shapes, Block Dim, Mix Block Dim, HF32 Eligible and Context ID are "N/A";
  - the hardware-counter group that aic_metrics names (Level1/Level2) adds its columns, "N/A" throughout: a software
    NPU has no PMU;
  - "Estimated Duration(us)" is added when the trace's kernels carry that estimate (the cost model's, issue 36): what
    the kernel would take on the chip the device presents itself as, next to what it took here.
"""

import statistics
from collections import defaultdict
from pathlib import Path

from . import csv_writer
from .trace import Trace

KERNEL_HEADERS = ["Device_id", "Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
                  "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim", "Mix Block Dim",
                  "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
                  "Output Data Types", "Output Formats", "Context ID"]
ESTIMATE = "Estimated Duration(us)"
# torch_npu's counter columns for each aic_metrics group (values of AiCMetrics).
PMU_HEADERS = {
    "ACL_AICORE_PIPE_UTILIZATION": [
        "aicore_time(us)", "aic_total_cycles", "aic_mac_time(us)", "aic_mac_ratio", "aic_scalar_time(us)",
        "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio", "aic_mte2_time(us)", "aic_mte2_ratio",
        "aic_fixpipe_time(us)", "aic_fixpipe_ratio", "aic_icache_miss_rate", "aiv_time(us)", "aiv_total_cycles",
        "aiv_vec_time(us)", "aiv_vec_ratio", "aiv_scalar_time(us)", "aiv_scalar_ratio", "aiv_mte2_time(us)",
        "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio", "aiv_icache_miss_rate", "cube_utilization(%)"],
    "ACL_AICORE_ARITHMETIC_UTILIZATION": [
        "aicore_time(us)", "aic_total_cycles", "aic_mac_fp16_ratio", "aic_mac_int8_ratio", "aic_cube_fops",
        "aiv_time(us)", "aiv_total_cycles", "aiv_vec_fp32_ratio", "aiv_vec_fp16_ratio", "aiv_vec_int32_ratio",
        "aiv_vec_misc_ratio", "aiv_vector_fops"],
    "ACL_AICORE_MEMORY_BANDWIDTH": [
        "aicore_time(us)", "aic_total_cycles", "aic_l1_read_bw(GB/s)", "aic_l1_write_bw(GB/s)",
        "aic_main_mem_read_bw(GB/s)", "aic_main_mem_write_bw(GB/s)", "aic_l2_read_bw(GB/s)", "aic_l2_write_bw(GB/s)",
        "aiv_time(us)", "aiv_total_cycles", "aiv_ub_read_bw(GB/s)", "aiv_ub_write_bw(GB/s)",
        "aiv_main_mem_read_bw(GB/s)", "aiv_main_mem_write_bw(GB/s)", "aiv_l2_read_bw(GB/s)", "aiv_l2_write_bw(GB/s)"],
    "ACL_AICORE_L0B_AND_WIDTH": [
        "aicore_time(us)", "aic_total_cycles", "aic_l0a_read_bw(GB/s)", "aic_l0a_write_bw(GB/s)",
        "aic_l0b_read_bw(GB/s)", "aic_l0b_write_bw(GB/s)", "aic_l0c_read_bw_cube(GB/s)",
        "aic_l0c_write_bw_cube(GB/s)", "aiv_time(us)", "aiv_total_cycles", "aiv_l0c_read_bw(GB/s)",
        "aiv_l0c_write_bw(GB/s)"],
    "ACL_AICORE_RESOURCE_CONFLICT_RATIO": [
        "aicore_time(us)", "aic_total_cycles", "aiv_time(us)", "aiv_total_cycles", "aiv_vec_bankgroup_cflt_ratio",
        "aiv_vec_bank_cflt_ratio", "aiv_vec_resc_cflt_ratio"],
    "ACL_AICORE_MEMORY_UB": [
        "aicore_time(us)", "aic_total_cycles", "aic_ub_read_bw_scalar(GB/s)", "aic_ub_write_bw_scalar(GB/s)",
        "aiv_time(us)", "aiv_total_cycles", "aiv_ub_read_bw_vector(GB/s)", "aiv_ub_write_bw_vector(GB/s)",
        "aiv_ub_read_bw_scalar(GB/s)", "aiv_ub_write_bw_scalar(GB/s)"],
    "ACL_AICORE_L2_CACHE": [
        "aicore_time(us)", "aic_total_cycles", "aic_write_cache_hit", "aic_write_cache_miss_allocate",
        "aic_r0_read_cache_hit", "aic_r0_read_cache_miss_allocate", "aic_r1_read_cache_hit",
        "aic_r1_read_cache_miss_allocate", "aiv_time(us)", "aiv_total_cycles", "aiv_write_cache_hit",
        "aiv_write_cache_miss_allocate", "aiv_r0_read_cache_hit", "aiv_r0_read_cache_miss_allocate",
        "aiv_r1_read_cache_hit", "aiv_r1_read_cache_miss_allocate"],
}
MODEL_ID = 4294967295  # torch_npu's model id of single-operator (eager) tasks
NA = "N/A"
OP_STATISTIC_HEADERS = ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)",
                        "Avg Time(us)", "Max Time(us)", "Ratio(%)"]
API_STATISTIC_HEADERS = ["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)",
                         "Variance"]


def core_type(task) -> str:
    return {"gpu_memcpy": "MEMCPY_ASYNC", "gpu_memset": "MEMSET"}.get(task.kind, "AI_CORE")


def op_type(task) -> str:
    if task.kind != "kernel":
        return core_type(task)
    return task.name.split("::", 1)[-1].split(".", 1)[0]


def _shapes(op) -> tuple:
    """torch_npu's spelling of an op's inputs: shapes "2,3;3" and types "FLOAT;FLOAT" (tensors only)."""
    if op is None or "Input Dims" not in op.args:
        return NA, NA, NA
    dims, types = op.args["Input Dims"], op.args.get("Input type", [])
    tensors = [(d, t) for d, t in zip(dims, types) if isinstance(d, list) and d and not isinstance(d[0], list)]
    if not tensors:
        return NA, NA, NA
    shapes = ";".join(",".join(str(x) for x in d) for d, _ in tensors)
    names = ";".join(_dtype_name(t) for _, t in tensors)
    return shapes, names, ";".join("ND" for _ in tensors)


def _dtype_name(t: str) -> str:
    return {"float": "FLOAT", "c10::Half": "FLOAT16", "c10::BFloat16": "DT_BF16", "double": "DOUBLE",
            "long int": "INT64", "int": "INT32", "bool": "BOOL", "signed char": "INT8",
            "unsigned char": "UINT8"}.get(t, t.upper() or NA)


def write_kernel_details(trace: Trace, out: Path, aic_metrics: str) -> None:
    pmu = PMU_HEADERS.get(aic_metrics, [])
    with_estimate = any(ESTIMATE in t.args for t in trace.tasks)
    headers = KERNEL_HEADERS + pmu + ([ESTIMATE] if with_estimate else [])
    rows = []
    for t in trace.tasks:
        shapes, dtypes, formats = _shapes(t.op)
        row = [t.device, "" if t.step is None else t.step, MODEL_ID, t.args.get("correlation", NA), t.stream, t.name,
               op_type(t), "static", core_type(t), csv_writer.us_timestamp(t.ts), csv_writer.us(t.dur), 0, NA, NA,
               NA, shapes, dtypes, formats, NA, NA, NA, NA] + [NA] * len(pmu)
        if with_estimate:
            row.append(t.args.get(ESTIMATE, NA))
        rows.append(row)
    csv_writer.write(out / "kernel_details.csv", headers, rows)


def write_op_statistic(trace: Trace, out: Path) -> None:
    groups = defaultdict(list)
    for t in trace.tasks:
        groups[(t.device, op_type(t), core_type(t))].append(float(t.dur))
    device_total = defaultdict(float)
    for (device, _, _), durs in groups.items():
        device_total[device] += sum(durs)
    rows = [[device, kind, core, len(durs), csv_writer.us(sum(durs)), csv_writer.us(min(durs)),
             csv_writer.us(sum(durs) / len(durs)), csv_writer.us(max(durs)),
             round(100 * sum(durs) / device_total[device], 2) if device_total[device] else 0]
            for (device, kind, core), durs in groups.items()]
    rows.sort(key=lambda r: (r[0], -r[4]))
    csv_writer.write(out / "op_statistic.csv", OP_STATISTIC_HEADERS, rows)


def write_api_statistic(trace: Trace, out: Path) -> None:
    """The host's calls into the runtime (each kernel launch), per API, as CANN's api_statistic counts ACL calls."""
    groups = defaultdict(list)
    for e in trace.host_events:
        if e.cat == "privateuse1_runtime":
            groups[e.name].append(float(e.dur))
    device = trace.devices[0] if trace.devices else 0
    rows = [[device, "runtime", name, csv_writer.us(sum(d)), len(d), csv_writer.us(sum(d) / len(d)),
             csv_writer.us(min(d)), csv_writer.us(max(d)), round(statistics.pvariance(d), 3)]
            for name, d in groups.items()]
    csv_writer.write(out / "api_statistic.csv", API_STATISTIC_HEADERS, rows)
