"""torch_npu.profiler's API and torch_npu's result directory ({worker}_{timestamp}_ascend_pt/ASCEND_PROFILER_OUTPUT),
and Ascend's tools on it: msprof-analyze (installed by the fixture, pinned) advisor, compare and cluster, and the
TensorBoard plugin for Ascend profiles (torch-tb-profiler-ascend).

One module fixture runs torch_npu's documented profiling example unchanged (a small model, Level0, one active step
after a skipped one) and a second profile with everything on (Level1, record_shapes, profile_memory, msprof_tx);
the tests read what they wrote.
"""

import csv
import importlib.util
import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
import torch_npu
from conftest import start_python

MSPROF_ANALYZE = ["msprof-analyze==26.2.0", "SQLAlchemy==2.1.9", "ijson==3.6.0", "pandas==3.1.1", "plotly==7.1.0",
                  "prettytable==3.19.0", "pybind11==3.1.0", "wcwidth==0.9.5", "xlsxwriter==3.3.1",
                  "narwhals==2.29.0"]
OUTPUT = "ASCEND_PROFILER_OUTPUT"
KERNEL_HEADERS = ["Device_id", "Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
                  "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim", "Mix Block Dim",
                  "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
                  "Output Data Types", "Output Formats", "Context ID"]
HEADERS = {
    "op_statistic.csv": ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)",
                         "Avg Time(us)", "Max Time(us)", "Ratio(%)"],
    "operator_details.csv": ["Name", "Input Shapes", "Call Stack", "Host Self Duration(us)",
                             "Host Total Duration(us)", "Device Self Duration(us)", "Device Total Duration(us)",
                             "Device Self Duration With AICore(us)", "Device Total Duration With AICore(us)"],
    "step_trace_time.csv": ["Device_id", "Step", "Computing", "Communication(Not Overlapped)", "Overlapped",
                            "Communication", "Free", "Stage", "Bubble",
                            "Communication(Not Overlapped and Exclude Receive)", "Preparing"],
    "memory_record.csv": ["Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)",
                          "Total Active(MB)", "Stream Ptr", "Device Type"],
    "operator_memory.csv": ["Name", "Size(KB)", "Allocation Time(us)", "Release Time(us)", "Active Release Time(us)",
                            "Duration(us)", "Active Duration(us)", "Allocation Total Allocated(MB)",
                            "Allocation Total Reserved(MB)", "Allocation Total Active(MB)",
                            "Release Total Allocated(MB)", "Release Total Reserved(MB)", "Release Total Active(MB)",
                            "Stream Ptr", "Device Type"],
    "api_statistic.csv": ["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)",
                          "Variance"],
}


def model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).npu()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = torch.nn.CrossEntropyLoss()
    data = [(torch.randn(64, 256), torch.randint(0, 10, (64,))) for _ in range(2)]
    return model, optimizer, criterion, data


def train_one_step(step, steps, train_loader, model, optimizer, criterion):
    inputs, target = train_loader[step % len(train_loader)]
    output = model(inputs.npu())
    loss = criterion(output, target.npu())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def documented_example(result: str, steps: int = 3):
    """torch_npu's documented profiling example (its API reference), unchanged but for the model and the path."""
    model, optimizer, criterion, train_loader = model_and_data()
    experimental_config = torch_npu.profiler._ExperimentalConfig(
        export_type=torch_npu.profiler.ExportType.Text,
        profiler_level=torch_npu.profiler.ProfilerLevel.Level0,
        msprof_tx=False,
        aic_metrics=torch_npu.profiler.AiCMetrics.AiCoreNone,
        l2_cache=False,
        op_attr=False,
        data_simplification=False,
        record_op_args=False,
        gc_detect_threshold=None)

    with torch_npu.profiler.profile(
            activities=[
                torch_npu.profiler.ProfilerActivity.CPU,
                torch_npu.profiler.ProfilerActivity.NPU
            ],
            schedule=torch_npu.profiler.schedule(wait=0, warmup=0, active=1, repeat=1, skip_first=1),
            on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(result),
            record_shapes=False,
            profile_memory=False,
            with_stack=False,
            with_modules=False,
            with_flops=False,
            experimental_config=experimental_config) as prof:
        for step in range(steps):
            train_one_step(step, steps, train_loader, model, optimizer, criterion)
            prof.step()


def full_profile(result: str, worker: str, steps: int = 3, analyse_flag: bool = True):
    """Everything on: Level1, shapes, memory, stacks, mstx markers."""
    model, optimizer, criterion, train_loader = model_and_data()
    config = torch_npu.profiler._ExperimentalConfig(profiler_level=torch_npu.profiler.ProfilerLevel.Level1,
                                                    msprof_tx=True, data_simplification=False)
    with torch_npu.profiler.profile(
            activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU],
            schedule=torch_npu.profiler.schedule(wait=0, warmup=0, active=2, repeat=1, skip_first=1),
            on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(result, worker_name=worker,
                                                                       analyse_flag=analyse_flag),
            record_shapes=True, profile_memory=True, with_stack=True, experimental_config=config) as prof:
        for step in range(steps):
            torch_npu.npu.mstx.mark(f"step {step} begins")
            rid = torch_npu.npu.mstx.range_start("train step")
            train_one_step(step, steps, train_loader, model, optimizer, criterion)
            torch_npu.npu.mstx.range_end(rid)
            prof.step()


def read_csv(path: Path) -> tuple[list, list]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    root = tmp_path_factory.mktemp("ascend")
    documented_example(str(root / "example"))
    full_profile(str(root / "full"), worker="worker0")
    (example,) = (root / "example").glob("*_ascend_pt")
    (full,) = (root / "full").glob("worker0_*_ascend_pt")
    return example, full


def test_documented_example_writes_the_result_directory(profiles):
    example, _ = profiles
    assert re.fullmatch(r".+_\d+_\d{17}_ascend_pt", example.name)  # {hostname}_{pid}_{timestamp}
    assert sorted(p.name for p in example.iterdir()) == ["ASCEND_PROFILER_OUTPUT", "FRAMEWORK", "profiler_info.json"]
    assert sorted(p.name for p in (example / OUTPUT).iterdir()) == [
        "kernel_details.csv", "op_statistic.csv", "operator_details.csv", "step_trace_time.csv", "trace_view.json"]
    info = json.loads((example / "profiler_info.json").read_text())
    assert info["config"]["experimental_config"]["_profiler_level"] == "Level0"
    assert info["config"]["common_config"]["activities"] == ["ProfilerActivity.CPU", "ProfilerActivity.NPU"]


def test_headers_are_torch_npus(profiles):
    example, full = profiles
    headers, _ = read_csv(example / OUTPUT / "kernel_details.csv")
    # Level0: no hardware-counter columns; the cost model's estimate of each kernel on the chip closes the row.
    assert headers == KERNEL_HEADERS + ["Estimated Duration(us)"]
    headers, _ = read_csv(full / OUTPUT / "kernel_details.csv")
    # Level1 collects PipeUtilization by default: its counter columns are there, "N/A" (no PMU in software).
    assert headers[:len(KERNEL_HEADERS)] == KERNEL_HEADERS and "aic_mac_time(us)" in headers
    for name, expected in HEADERS.items():
        assert read_csv(full / OUTPUT / name)[0] == expected, name


def test_kernel_details_lists_each_kernel_with_its_op_inputs(profiles):
    _, full = profiles
    _, rows = read_csv(full / OUTPUT / "kernel_details.csv")
    addmm = [r for r in rows if r["Name"] == "aten::addmm"]
    # Two Linear layers, two active steps: the kernels launched while recording (with their launch's id); the skipped
    # step's kernels that ran after the recording started are listed too, without one.
    launched = [r for r in addmm if r["Task ID"] != "N/A"]
    assert len(launched) == 4
    assert {r["Step Id"] for r in rows} == {"1", "2"}  # torch's step numbers (ProfilerStep#1, #2)
    addmm = launched
    assert {r["Stream ID"] for r in addmm} == {"7"} and {r["Accelerator Core"] for r in addmm} == {"AI_CORE"}
    assert "64,256" in addmm[0]["Input Shapes"] and addmm[0]["Input Data Types"].startswith("FLOAT")
    assert all(float(r["Duration(us)"]) > 0 for r in rows)
    assert all(r["aic_mac_time(us)"] == "N/A" for r in rows)
    statistic = {r["OP Type"]: r for r in read_csv(full / OUTPUT / "op_statistic.csv")[1]}
    every_addmm = [r for r in rows if r["Name"] == "aten::addmm"]
    assert statistic["addmm"]["Count"] == str(len(every_addmm)) and statistic["addmm"]["Core Type"] == "AI_CORE"
    total = sum(float(r["Duration(us)"]) for r in every_addmm)
    assert float(statistic["addmm"]["Total Time(us)"]) == pytest.approx(total, abs=0.01)


def test_operator_details_gives_ops_their_device_time(profiles):
    _, full = profiles
    _, rows = read_csv(full / OUTPUT / "operator_details.csv")
    linears = [r for r in rows if r["Name"] == "aten::linear"]
    assert len(linears) == 4 and all(float(r["Device Total Duration(us)"]) > 0 for r in linears)
    assert all(float(r["Device Self Duration(us)"]) == 0 for r in linears)  # the kernel is addmm's
    assert any("test_ascend_profiler.py" in r["Call Stack"] for r in linears)  # with_stack=True


def test_step_trace_time_splits_each_step(profiles):
    _, full = profiles
    _, rows = read_csv(full / OUTPUT / "step_trace_time.csv")
    assert [r["Step"] for r in rows] == ["1", "2"]
    for r in rows:
        assert float(r["Computing"]) > 0 and float(r["Communication"]) == 0
        assert float(r["Stage"]) == pytest.approx(float(r["Computing"]) + float(r["Free"]), abs=0.01)


def test_memory_views_show_npu_memory(profiles):
    _, full = profiles
    _, records = read_csv(full / OUTPUT / "memory_record.csv")
    assert records and {r["Component"] for r in records} == {"PTA"} and {r["Device Type"] for r in records} == {
        "NPU:0"}
    assert max(float(r["Total Allocated(MB)"]) for r in records) > 0
    assert all(float(r["Total Reserved(MB)"]) >= float(r["Total Allocated(MB)"]) for r in records)
    _, blocks = read_csv(full / OUTPUT / "operator_memory.csv")
    addmm = [b for b in blocks if b["Name"] == "aten::addmm"]
    # The first Linear's output, in the block torch_npu's allocator takes for it (32-byte pad, rounded to 512).
    assert {float(b["Size(KB)"]) for b in addmm} >= {(64 * 256 * 4 + 512) / 1024}


def test_api_statistic_counts_kernel_launches_at_level1(profiles):
    _, full = profiles
    _, rows = read_csv(full / OUTPUT / "api_statistic.csv")
    (launch,) = [r for r in rows if r["API Name"] == "snpuLaunchKernel"]
    _, kernels = read_csv(full / OUTPUT / "kernel_details.csv")
    # Every kernel launched while recording (those with a launch id) was one call.
    assert int(launch["Count"]) >= sum(r["Type"] != "MEMCPY_ASYNC" and r["Task ID"] != "N/A" for r in kernels) > 0


def test_trace_view_has_ascend_processes_flows_and_mstx(profiles):
    _, full = profiles
    events = json.loads((full / OUTPUT / "trace_view.json").read_text())
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {"Python", "Ascend Hardware", "Overlap Analysis"} <= set(processes.values())
    hardware = next(pid for pid, name in processes.items() if name == "Ascend Hardware")
    kernels = [e for e in events if e.get("pid") == hardware and e.get("ph") == "X"]
    assert kernels and all(e["args"]["Task Type"] in ("AI_CORE", "MEMCPY_ASYNC") for e in kernels)
    ops = {(e["pid"], e["tid"], e["ts"]): e for e in events if e.get("cat") == "cpu_op"}
    starts = {e["id"]: e for e in events if e.get("cat") == "async_npu" and e["ph"] == "s"}
    ends = [e for e in events if e.get("cat") == "async_npu" and e["ph"] == "f"]
    assert len(ends) == len([k for k in kernels if k["args"]["Task Id"] is not None])  # launched while recording
    for end in ends:  # each arrow starts at the op that launched the kernel
        start = starts[end["id"]]
        assert ops[(start["pid"], start["tid"], start["ts"])]["name"].startswith("aten::")
    overlap = {e["name"] for e in events if e.get("pid") != hardware and e.get("ph") == "X"
               and processes.get(e["pid"]) == "Overlap Analysis"}
    assert {"Computing", "Free"} <= overlap
    marks = [e for e in events if e.get("cat") == "mstx"]
    assert sum(e["name"] == "train step" and e["dur"] > 0 for e in marks) == 2  # the ranges of the 2 active steps
    assert sum(e["name"].startswith("step ") for e in marks) == 2


def test_mstx_does_nothing_without_a_profiler():
    assert torch_npu.npu.mstx.range_start("idle") == 0
    torch_npu.npu.mstx.range_end(0)
    torch_npu.npu.mstx.mark("idle")
    with pytest.warns(UserWarning, match="Invalid message"):  # torch_npu's mstx warns and does nothing
        torch_npu.npu.mstx.mark(3)


def test_experimental_config_checks_its_arguments():
    prof = torch_npu.profiler
    with pytest.warns(UserWarning, match="level1 or level2"):
        config = prof._ExperimentalConfig(aic_metrics=prof.AiCMetrics.PipeUtilization)
    assert config._aic_metrics == prof.AiCMetrics.AiCoreNone
    assert prof._ExperimentalConfig(profiler_level=prof.ProfilerLevel.Level2)._aic_metrics == \
        prof.AiCMetrics.PipeUtilization
    with pytest.warns(UserWarning, match="profiler_level"):
        assert prof._ExperimentalConfig(profiler_level="Level9")._profiler_level == prof.ProfilerLevel.Level0
    with pytest.warns(UserWarning, match="op_attr"):
        assert not prof._ExperimentalConfig(op_attr=True)._op_attr  # only with the db export
    config = prof._ExperimentalConfig(gc_detect_threshold=0.5, export_type=prof.ExportType.Db)
    assert config.with_gc and config.export_type == "db"
    assert prof.supported_profiler_level() == {"Level0", "Level1", "Level2"}
    assert len(prof.supported_ai_core_metrics()) == 7


def test_offline_analyse_and_the_estimate_column(tmp_path):
    full_profile(str(tmp_path), worker="offline", steps=2, analyse_flag=False)
    (result,) = tmp_path.glob("offline_*_ascend_pt")
    assert not (result / OUTPUT).exists()
    # A kernel estimate in the trace (the cost model's "Estimated Duration(us)" arg) becomes a column.
    raw = result / "FRAMEWORK" / "torch.trace.json"
    trace = json.loads(raw.read_text())
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel":
            e["args"]["Estimated Duration(us)"] = 1.5
    raw.write_text(json.dumps(trace))
    torch_npu.profiler.profiler.analyse(str(tmp_path))
    headers, rows = read_csv(result / OUTPUT / "kernel_details.csv")
    assert headers[-1] == "Estimated Duration(us)"
    assert {r["Estimated Duration(us)"] for r in rows if r["Accelerator Core"] == "AI_CORE"} == {"1.5"}
    with pytest.raises(FileNotFoundError):
        torch_npu.profiler.analyse(str(tmp_path / "nothing"))


def kineto_profile_of_mm():
    prof = torch_npu.profiler._KinetoProfile(
        activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU],
        experimental_config=torch_npu.profiler._ExperimentalConfig())
    x = torch.randn(64, 64, device="npu")
    torch.npu.synchronize()
    prof.start()
    (x @ x).cpu()
    prof.stop()
    return prof


def test_kineto_profile_and_handler(tmp_path):
    prof = kineto_profile_of_mm()
    torch_npu.profiler.tensorboard_trace_handler(str(tmp_path), worker_name="kineto")(prof)
    (result,) = tmp_path.glob("kineto_*_ascend_pt")
    _, rows = read_csv(result / OUTPUT / "kernel_details.csv")
    assert [r["Name"] for r in rows if r["Accelerator Core"] == "AI_CORE"] == ["aten::mm"]
    assert not (result / "FRAMEWORK").exists()  # data_simplification (default on) drops the raw data
    # async_mode: the handler returns at once; a background process writes ASCEND_PROFILER_OUTPUT.
    torch_npu.profiler.tensorboard_trace_handler(str(tmp_path / "async"), worker_name="bg", async_mode=True)(
        kineto_profile_of_mm())
    (result,) = (tmp_path / "async").glob("bg_*_ascend_pt")
    deadline = time.monotonic() + 60
    while not (result / OUTPUT / "step_trace_time.csv").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert read_csv(result / OUTPUT / "kernel_details.csv")[1]


def test_dynamic_profile_collects_when_the_config_changes(tmp_path):
    dp = torch_npu.profiler.dynamic_profile
    dp.init(str(tmp_path / "cfg"))
    config_path = tmp_path / "cfg" / "profiler_config.json"
    config = json.loads(config_path.read_text())
    assert config["active"] == 1 and config["experimental_config"]["profiler_level"] == "Level0"
    x = torch.randn(32, 32, device="npu")
    dp.step()
    assert not list(tmp_path.glob("**/*_ascend_pt"))  # the template alone starts nothing
    config.update(prof_dir=str(tmp_path / "out"), active=2, start_step=3, analyse=True)
    config_path.write_text(json.dumps(config))
    for _ in range(6):
        (x @ x).sum().item()
        dp.step()
    (result,) = (tmp_path / "out").glob("*_ascend_pt")
    _, rows = read_csv(result / OUTPUT / "kernel_details.csv")
    assert sum(r["Name"] == "aten::mm" for r in rows) == 2  # two active steps


# --- msprof-analyze on softnpu's profiles


def pip_install(*requirements):
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *requirements], check=True)


@pytest.fixture(scope="module")
def msprof_analyze():
    if importlib.util.find_spec("msprof_analyze") is None:
        try:
            pip_install(*MSPROF_ANALYZE)
        except subprocess.CalledProcessError:
            pytest.skip("msprof-analyze could not be installed (no package index?)")
    script = Path(sys.executable).parent / "msprof-analyze"

    def run(*args) -> str:
        done = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    return run


def test_msprof_analyze_advisor(profiles, msprof_analyze, tmp_path):
    _, full = profiles
    out = msprof_analyze("advisor", "all", "-d", str(full), "-o", str(tmp_path))
    # Its overall analysis reads the step's split from our files: computing time and free time, no communication.
    e2e = float(re.search(r"模型E2E的时间是([\d.]+)ms", out).group(1))
    computing = float(re.search(r"计算时长是([\d.]+)ms", out).group(1))
    free = float(re.search(r"空闲时长是([\d.]+)ms", out).group(1))
    assert e2e > 0 and computing > 0 and e2e == pytest.approx(computing + free, abs=0.01)
    assert re.search(r"未被掩盖的通信时长是0\.0ms", out)
    assert list(tmp_path.glob("mstt_advisor_*.html"))


def test_msprof_analyze_compare(profiles, msprof_analyze, tmp_path):
    example, full = profiles
    out = msprof_analyze("compare", "-d", str(full), "-bp", str(example), "-o", str(tmp_path))
    table = re.search(r"Model Profiling Time Distribution(.*)", out, re.S).group(1)
    rows = [line for line in table.splitlines() if line.startswith("| NPU")]
    assert len(rows) == 2  # both profiles read as NPU (Ascend) profiles
    # Its times are seconds to 3 decimals: these short profiles read 0.000s or 0.001s (the advisor test checks the
    # step's split in ms); each row must carry them.
    e2e = [float(re.findall(r"([\d.]+)s", row)[-1]) for row in rows]
    assert all(0 <= t < 1 for t in e2e), rows
    (report,) = tmp_path.glob("performance_comparison_result_*.xlsx")
    with zipfile.ZipFile(report) as book:
        sheets = book.read("xl/workbook.xml").decode()
        strings = book.read("xl/sharedStrings.xml").decode()
    assert "OverallMetrics" in sheets and "OperatorCompare" in sheets
    assert "aten::addmm" in strings and "aten::linear" in strings  # the ops it matched between the two


CLUSTER_RANK = """
import sys, torch, torch.distributed as dist, torch_npu
rank, store, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.npu.set_device(rank)
dist.init_process_group("hccl", init_method=f"file://{store}", rank=rank, world_size=2)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(128, 128).npu(), device_ids=[rank])
x = torch.randn(32, 128, device="npu")
with torch_npu.profiler.profile(
        activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU],
        schedule=torch_npu.profiler.schedule(wait=0, warmup=0, active=2, repeat=1, skip_first=1),
        on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(out)) as prof:
    for _ in range(3):
        model(x).sum().backward()
        prof.step()
dist.barrier()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    code = f"import sys; sys.argv = [''] + {{args}}\n{CLUSTER_RANK}"
    ranks = [start_python(code.replace("{args}", repr([str(r), str(root / "store"), str(root / "prof")])))
             for r in range(2)]
    for rank in ranks:
        rank.wait()
    return root / "prof"


def test_hccl_collectives_become_communication_data(cluster_run):
    results = sorted(cluster_run.glob("*_ascend_pt"))
    assert [sorted(p.name for p in r.glob("profiler_info*.json")) for r in results] in (
        [["profiler_info_0.json"], ["profiler_info_1.json"]], [["profiler_info_1.json"], ["profiler_info_0.json"]])
    for result in results:
        communication = json.loads((result / OUTPUT / "communication.json").read_text())
        assert sorted(communication) == ["step1", "step2"]
        ops = communication["step2"]["collective"]
        reduce = [name for name in ops if name.startswith("hcom_allReduce_")]
        assert len(reduce) == 1  # DDP's one gradient bucket
        info = ops[reduce[0]]
        assert info["Communication Time Info"]["Elapse Time(ms)"] > 0
        assert info["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"] == pytest.approx(
            (128 * 128 + 128) * 4 / 2**20, rel=1e-4)  # the gradients' bytes
        matrix = json.loads((result / OUTPUT / "communication_matrix.json").read_text())
        assert "allreduce-total@0" in matrix["step2"]["collective"]
        _, steps = read_csv(result / OUTPUT / "step_trace_time.csv")
        assert all(float(r["Communication"]) > 0 for r in steps)
        events = json.loads((result / OUTPUT / "trace_view.json").read_text())
        assert "Communication" in {e["args"]["name"] for e in events if e.get("name") == "process_name"}


def test_msprof_analyze_cluster(cluster_run, msprof_analyze):
    msprof_analyze("cluster", "-d", str(cluster_run), "-m", "all")
    out = cluster_run / "cluster_analysis_output"
    group = json.loads((out / "communication_group.json").read_text())
    assert group["collective"] == [[0, 1]]  # the two ranks found as one communication group
    _, steps = read_csv(out / "cluster_step_trace_time.csv")
    ranks = [r for r in steps if r["Type"] == "rank"]
    assert sorted(r["Index"] for r in ranks) == ["0", "0", "1", "1"]  # two steps of each rank
    assert all(float(r["Computing"]) > 0 and float(r["Communication"]) > 0 for r in ranks)
    communication = json.loads((out / "cluster_communication.json").read_text())
    ops = communication["(0, 1)"]["step2"]
    reduce = [name for name in ops if name.startswith("hcom_allReduce_")]
    assert reduce and sorted(ops[reduce[0]]) == ["0", "1"]  # the collective seen from both ranks
    matrix = json.loads((out / "cluster_communication_matrix.json").read_text())
    links = matrix["(0, 1)"]["step2"]["allreduce-total@0"]
    assert links["0-1"]["Transport Type"] == "HCCS" and links["0-1"]["Transit Size(MB)"] > 0


# --- the TensorBoard plugin for Ascend profiles (torch-tb-profiler-ascend) reads the result directory

TB_PLUGIN = ["torch-tb-profiler-ascend==0.4.0.11", "tensorboard==2.21.0", "absl-py==2.5.1", "pandas==3.1.1"]
TB_LOAD = """
import json, sys
from torch_tb_profiler import io
from torch_tb_profiler.profiler.loader import RunLoader

def main():
    run = RunLoader("run", sys.argv[1], io.Cache(), device_target="Ascend").load()
    out = []
    for p in run.get_profiles():
        rows = p.kernel_table["data"]["rows"] if p.kernel_table else []
        out.append({"worker": p.worker, "views": [v.name for v in p.views],
                    "kernels": sorted({str(r[5]) for r in rows})})
    print(json.dumps(out))

if __name__ == "__main__":
    main()
"""


def test_tensorboard_plugin_loads_the_result_directory(profiles, tmp_path):
    if any(importlib.util.find_spec(m) is None for m in ("torch_tb_profiler", "tensorboard", "absl")):
        try:
            pip_install(*TB_PLUGIN)
        except subprocess.CalledProcessError:
            pytest.skip("torch-tb-profiler-ascend could not be installed (no package index?)")
    _, full = profiles
    script = tmp_path / "load.py"  # the plugin's loader starts processes: it needs an importable main module
    script.write_text(TB_LOAD)
    done = subprocess.run([sys.executable, str(script), str(full.parent)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    (profile,) = json.loads(done.stdout.strip().splitlines()[-1])
    assert profile["worker"] == "worker0"
    assert {"operator", "kernel", "memory", "trace"} <= set(profile["views"])
    assert "aten::addmm" in profile["kernels"]


def test_gc_detection_and_db_export_type(tmp_path):
    import gc

    config = torch_npu.profiler._ExperimentalConfig(gc_detect_threshold=0, export_type=torch_npu.profiler.ExportType.Db)
    x = torch.randn(16, 16, device="npu")
    with pytest.warns(UserWarning, match="no database exporter"):
        with torch_npu.profiler.profile(
                activities=[torch_npu.profiler.ProfilerActivity.CPU, torch_npu.profiler.ProfilerActivity.NPU],
                on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(str(tmp_path), worker_name="gc"),
                experimental_config=config):
            (x + 1).cpu()
            gc.collect()  # threshold 0: every collection is reported
    (result,) = tmp_path.glob("gc_*_ascend_pt")
    events = json.loads((result / OUTPUT / "trace_view.json").read_text())
    (gc_event, *_) = [e for e in events if e["name"] == "GC" and e.get("cat") == "GC"]
    assert gc_event["dur"] >= 0 and gc_event["tid"] == gc_event["pid"]  # on the main thread of the host process
