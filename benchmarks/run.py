"""make bench: softnpu against the CPU it runs on, in one run. Prints one table of ratios, writes
benchmarks/results/bench.json and a chart, benchmarks/results/bench.png."""

import argparse
import json
import os
import platform
import sys
import time

import torch

import softnpu.host

sys.path.insert(0, os.path.dirname(__file__))
import cases  # noqa: E402
import timing  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def run_case(name: str, rounds: int) -> dict:
    make, kind, target, ops = cases.CASES[name]
    times = {k: v / ops for k, v in timing.measure(make(), rounds=rounds).items()}
    row = {"case": name, "kind": kind, "target": target, "seconds": times}
    if kind == "time":
        row["npu/cpu"] = times["npu"] / times["cpu"]
        if "baseline" in times:
            row["baseline/npu"] = times["baseline"] / times["npu"]
    elif kind == "compiled":
        row["npu/cpu"] = times["npu"] / times["cpu"]
        row["compiled/eager npu"] = times["npu"] / times["eager npu"]
        row["compile seconds"] = {c: cases.FIRST_STEP_SECONDS[c] - times[c] for c in ("cpu", "npu")}
    elif kind == "graphed":
        row["npu/cpu"] = times["npu"] / times["cpu"]
        row["replay/eager npu"] = times["npu"] / times["eager npu"]
    elif kind == "dtype":
        for name in times:
            if name != "float32":
                row[f"{name}/float32"] = times[name] / times["float32"]
    elif kind == "fused":
        row["fused/composite"] = times["fused"] / times["composite"]
    elif kind == "bandwidth":
        row["npu/cpu"] = times["cpu"] / times["npu"]  # bandwidth ratio: the same bytes in less time is higher
    else:
        row["two/one"] = times["two streams"] / times["one stream"]
    return row


def format_row(row: dict) -> str:
    t = row["seconds"]
    if row["kind"] == "streams":
        detail = f"one {t['one stream'] * 1e3:9.3f} ms  two {t['two streams'] * 1e3:9.3f} ms"
        ratio = f"two/one {row['two/one']:5.2f}"
    elif row["kind"] == "dtype":
        detail = "  ".join(f"{name} {seconds * 1e3:.3f} ms" for name, seconds in t.items())
        ratio = "  ".join(f"{key} {value:.2f}" for key, value in row.items() if key.endswith("/float32"))
        return f"{row['case']:<38}{detail}\n{'':<38}{ratio:<74}{row['target'] or ''}"
    elif row["kind"] == "fused":
        unit, scale = ("us", 1e6) if t["composite"] < 1e-3 else ("ms", 1e3)
        detail = f"fused {t['fused'] * scale:9.2f} {unit}  composite {t['composite'] * scale:9.2f} {unit}"
        return f"{row['case']:<38}{detail}   fused/composite {row['fused/composite']:5.2f}   {row['target'] or ''}"
    else:
        unit, scale = ("us", 1e6) if t["cpu"] < 1e-3 else ("ms", 1e3)
        detail = f"cpu {t['cpu'] * scale:9.2f} {unit}  npu {t['npu'] * scale:9.2f} {unit}"
        label = "npu/cpu bw" if row["kind"] == "bandwidth" else "npu/cpu"
        ratio = f"{label} {row['npu/cpu']:5.2f}"
        if "baseline/npu" in row:
            ratio += f"   baseline/npu {row['baseline/npu']:5.2f}"
        if row["kind"] == "graphed":
            detail += f"  eager npu {t['eager npu'] * scale:9.2f} {unit}"
            ratio += f"   replay/eager npu {row['replay/eager npu']:5.2f}   "
        if row["kind"] == "compiled":
            compile_s = row["compile seconds"]
            detail += f"  eager npu {t['eager npu'] * scale:9.2f} {unit}"
            ratio += (f"   compiled/eager npu {row['compiled/eager npu']:5.2f}   compile s: "
                      f"cpu {compile_s['cpu']:.1f} npu {compile_s['npu']:.1f}   ")
    return f"{row['case']:<38}{detail}   {ratio:<36}{row['target'] or ''}"


def chart(rows: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, values, colors = [], [], []
    for row in rows:
        if row["kind"] == "streams":
            labels.append(row["case"] + " (two/one)")
            values.append(row["two/one"])
        elif row["kind"] == "dtype":
            for key in (k for k in row if k.endswith("/float32")):
                labels.append(f"{row['case']} ({key})")
                values.append(row[key])
                colors.append("tab:orange")
            continue
        elif row["kind"] == "fused":
            labels.append(row["case"] + " (fused/composite)")
            values.append(row["fused/composite"])
            colors.append("tab:green")
            continue
        else:
            labels.append(row["case"] + {"bandwidth": " (bandwidth)", "compiled": " (compiled npu/compiled cpu)",
                                         "graphed": " (replayed npu/cpu)"}.get(row["kind"], ""))
            values.append(row["npu/cpu"])
        colors.append("tab:blue")
        if "baseline/npu" in row:
            labels.append(row["case"] + " (copy-through-CPU baseline)")
            values.append(row["seconds"]["baseline"] / row["seconds"]["cpu"])
            colors.append("tab:gray")
    fig, ax = plt.subplots(figsize=(10, 0.38 * len(labels) + 1.2))
    ax.barh(range(len(labels)), values, color=colors)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("ratio to CPU eager, or for half rows (orange) to float32 on npu "
                  "(time: lower is better; bandwidth: higher is better)")
    ax.set_title(f"softnpu / CPU, {platform.node()}, {time.strftime('%Y-%m-%d %H:%M')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", nargs="*", help="substrings of case names to run")
    args = parser.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    names = [n for n in cases.CASES if not args.only or any(s in n for s in args.only)]
    host = softnpu.host.describe()
    present = [name for name, has in host["features"].items() if has]
    print(f"softnpu benchmarks: torch {torch.__version__}, {os.cpu_count()} host cores, "
          f"{torch.npu.get_device_properties(0).multi_processor_count} AI cores per npu, {args.rounds} rounds")
    print(f"host: {host['cpu']}; half-precision features: {', '.join(present) or 'none'}")
    print("half precision: " + "; ".join(f"{k} {v}" for k, v in host["half_compute"].items()) + "\n")
    rows = []
    for name in names:
        row = run_case(name, args.rounds)
        rows.append(row)
        print(format_row(row), flush=True)
    with open(os.path.join(RESULTS, "bench.json"), "w") as f:
        json.dump({"torch": torch.__version__, "host_cores": os.cpu_count(), "host": host, "rows": rows}, f, indent=2)
    chart(rows, os.path.join(RESULTS, "bench.png"))
    print(f"\nwrote {os.path.relpath(RESULTS)}/bench.json and bench.png")


if __name__ == "__main__":
    main()
