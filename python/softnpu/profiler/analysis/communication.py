"""communication.json and communication_matrix.json (hccl runs): each collective of the rank, per step, with
torch_npu's time and bandwidth fields, which msprof-analyze cluster reads from every rank.

A collective is the device profiler's event of it on the communication stream (csrc/backend/profiler/
collective_trace.h: from its hand-over to Gloo, which carries softnpu's hccl, to Gloo's completion):
  - Elapse Time = Transit Time = that duration; Gloo does not tell waiting for the peer from moving data, so Wait
    and Synchronization times are 0 (on Ascend they come from the chip's Notify_Wait tasks);
  - Transit Size is the collective's payload (the tensors' bytes), moved over the link between two devices of one
    server, which Ascend names HCCS (and counts in SDMA, its intra-server total); RDMA (between servers) is 0;
  - the op names are HCCL's (hcom_allReduce_...) numbered in the order the rank ran them, and the group is the
    process group's name, so the same collective has the same name on every rank.
Sizes are in MB (2^20 bytes), times in ms, bandwidths in GB/s (MB/ms), as in torch_npu's files.
"""

import json
from collections import defaultdict
from pathlib import Path

from .trace import Trace

TIME = "Communication Time Info"
BANDWIDTH = "Communication Bandwidth Info"
TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
LINK = "HCCS"
MB = 1024 * 1024


def group_info(trace: Trace) -> tuple:
    """(group name, ranks) of the default process group, and this process's rank."""
    info = trace.distributed
    groups = info.get("pg_config") or [{}]
    default = next((g for g in groups if g.get("pg_desc") == "default_pg"), groups[0])
    ranks = default.get("ranks") or list(range(int(info.get("world_size", 1))))
    return str(default.get("pg_name", "0")), ranks, int(info.get("rank", 0))


def op_name(c, group: str) -> str:
    return f"{c.name}_{c.index}_0_1@{group}"


def _is_p2p(name: str) -> bool:
    return name.startswith(("hcom_send", "hcom_receive", "hcom_batchsendrecv"))


def _bandwidth(size_mb: float, time_ms: float) -> float:
    return round(size_mb / time_ms, 4) if time_ms > 1e-15 else 0


def _op_info(c) -> dict:
    ms = float(c.dur) / 1000
    size = c.bytes / MB
    empty = {"Transit Time(ms)": 0, "Transit Size(MB)": 0, "Bandwidth(GB/s)": 0, "Large Packet Ratio": 0,
             "Size Distribution": {}}
    moved = {"Transit Time(ms)": round(ms, 6), "Transit Size(MB)": round(size, 6),
             "Bandwidth(GB/s)": _bandwidth(size, ms), "Large Packet Ratio": 0,
             "Size Distribution": {str(round(size, 6)): [1, round(ms, 6)]}}
    return {
        TIME: {"Start Timestamp(us)": float(c.ts), "Elapse Time(ms)": round(ms, 6), "Transit Time(ms)": round(ms, 6),
               "Wait Time(ms)": 0, "Synchronization Time(ms)": 0, "Idle Time(ms)": 0, "Wait Time Ratio": 0,
               "Synchronization Time Ratio": 0},
        BANDWIDTH: {t: dict(moved) if t in (LINK, "SDMA") else dict(empty) for t in TRANSPORTS},
    }


def _total(ops: dict) -> dict:
    time, bandwidth = defaultdict(float), {}
    for info in ops.values():
        for k, v in info[TIME].items():
            if k not in ("Start Timestamp(us)", "Wait Time Ratio", "Synchronization Time Ratio"):
                time[k] += v
        for transport, d in info[BANDWIDTH].items():
            b = bandwidth.setdefault(transport, {"Transit Time(ms)": 0, "Transit Size(MB)": 0,
                                                 "Bandwidth(GB/s)": 0, "Large Packet Ratio": 0,
                                                 "Size Distribution": {}})
            b["Transit Time(ms)"] += d["Transit Time(ms)"]
            b["Transit Size(MB)"] += d["Transit Size(MB)"]
            for size, (count, ms) in d["Size Distribution"].items():
                prev = b["Size Distribution"].get(size, [0, 0])
                b["Size Distribution"][size] = [prev[0] + count, prev[1] + ms]
    for b in bandwidth.values():
        b["Bandwidth(GB/s)"] = _bandwidth(b["Transit Size(MB)"], b["Transit Time(ms)"])
    time["Wait Time Ratio"] = 0
    time["Synchronization Time Ratio"] = 0
    return {TIME: dict(time), BANDWIDTH: bandwidth}


def step_key(step) -> str:
    return "step" if step is None else f"step{step}"


def write(trace: Trace, out: Path) -> None:
    if not trace.collectives:
        return
    group, ranks, rank = group_info(trace)
    communication, matrix = {}, {}
    for c in trace.collectives:
        kind = "p2p" if _is_p2p(c.name) else "collective"
        name = op_name(c, group)
        communication.setdefault(step_key(c.step), {"collective": {}, "p2p": {}})[kind][name] = _op_info(c)
        ms, size = float(c.dur) / 1000, c.bytes / MB
        # Links between ranks of the group (local ranks: positions in the group), the rank's own "r-r" link
        # included (HCCL's LOCAL link, by which the cluster tool maps local ranks to global ones).
        local = ranks.index(rank) if rank in ranks else rank
        links = {f"{local}-{ranks.index(peer)}": {"Transport Type": LINK if peer != rank else "LOCAL",
                                                  "Transit Size(MB)": round(size, 6) if peer != rank else 0,
                                                  "Transit Time(ms)": round(ms, 6) if peer != rank else 0,
                                                  "Bandwidth(GB/s)": _bandwidth(size, ms) if peer != rank else 0,
                                                  "Op Name": name.split("@")[0]}
                 for peer in ranks}
        matrix.setdefault(step_key(c.step), {"collective": {}, "p2p": {}})[kind][name] = links
    for steps in communication.values():
        for kind, ops in steps.items():
            if ops:
                ops["Total Op Info"] = _total(ops)
    (out / "communication.json").write_text(json.dumps(communication, indent=1))
    (out / "communication_matrix.json").write_text(json.dumps(_integrate(matrix), indent=1))


def _integrate(matrix: dict) -> dict:
    """Per collective type and link: its fastest, middle, slowest ops and its total (torch_npu's matrix form)."""
    out = {}
    for step, kinds in matrix.items():
        out[step] = {}
        for kind, ops in kinds.items():
            by_type = defaultdict(list)
            for name, links in ops.items():
                kind_name = name.split("_")[1].lower()  # hcom_allReduce__3_0_1@g -> allreduce
                for link, data in links.items():
                    by_type[(kind_name, name.split("@")[-1], link)].append(data)
            merged = defaultdict(dict)
            for (kind_name, group, link), rows in by_type.items():
                rows.sort(key=lambda r: r["Bandwidth(GB/s)"], reverse=True)
                size = sum(r["Transit Size(MB)"] for r in rows)
                ms = sum(r["Transit Time(ms)"] for r in rows)
                merged[f"{kind_name}-top1@{group}"][link] = rows[0]
                merged[f"{kind_name}-middle@{group}"][link] = rows[len(rows) // 2]
                merged[f"{kind_name}-bottom1@{group}"][link] = rows[-1]
                merged[f"{kind_name}-total@{group}"][link] = {"Transport Type": rows[0]["Transport Type"],
                                                             "Transit Size(MB)": size,
                                                             "Transit Time(ms)": ms,
                                                             "Bandwidth(GB/s)": _bandwidth(size, ms)}
            out[step][kind] = dict(merged)
    return out
