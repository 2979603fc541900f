"""python -m ais_bench --model x.om [--loop N] [--warmup_count N] [--batchsize B] [--dymBatch B] [--dymDims ...]
[--device D]: runs the model on zero inputs and prints ais_bench's performance summary: the host's time copying inputs
to the device (H2D) and outputs back (D2H), the compute time of each run on the device (between two events around it
on its stream), and throughput = 1000 * batchsize / mean compute time."""
import argparse
import sys

import numpy as np

from ais_bench.infer.interface import InferSession, _NUMPY


def _parse_dym_dims(text):
    """ais_bench's --dymDims: "in1:1,3,224,224;in2:1,8"."""
    shapes = {}
    for part in filter(None, text.split(";")):
        name, _, dims = part.rpartition(":")
        shapes[name] = [int(d) for d in dims.split(",")]
    return shapes


def _summary_line(name, values):
    v = np.asarray(values)
    return (f"[INFO] {name} (ms): min = {v.min():.4f}, max = {v.max():.4f}, mean = {v.mean():.4f}, "
            f"median = {np.median(v):.4f}, percentile(99%) = {np.percentile(v, 99):.4f}")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ais_bench", description=__doc__)
    p.add_argument("--model", "-m", required=True, help="the offline model (.om)")
    p.add_argument("--loop", "-l", type=int, default=1, help="runs measured")
    p.add_argument("--warmup_count", type=int, default=1, help="runs before the measured ones")
    p.add_argument("--batchsize", type=int, default=None, help="batch size of the throughput (default: dim 0 of input 0)")
    p.add_argument("--device", "-d", type=int, default=0)
    p.add_argument("--dymBatch", type=int, default=0, help="the batch size of a --dynamic_batch_size model")
    p.add_argument("--dymDims", default=None, help='the shapes of a --dynamic_dims model: "in1:1,3,224,224;in2:..."')
    args = p.parse_args(argv)
    if args.loop < 1 or args.warmup_count < 0:
        p.error("--loop must be at least 1 and --warmup_count at least 0")

    session = InferSession(args.device, args.model)
    mode, shapes = "static", {}
    if args.dymBatch:
        mode = "dymbatch"
    elif args.dymDims:
        mode, shapes = "dymdims", _parse_dym_dims(args.dymDims)
    feeds = []
    for t in session.get_inputs():
        shape = shapes.get(t.name, list(t.shape))
        shape = [args.dymBatch if d < 0 and args.dymBatch else d for d in shape]
        if any(d < 0 for d in shape):
            p.error(f"input {t.name} has dynamic dims {t.shape}: give --dymBatch or --dymDims")
        feeds.append(np.zeros(shape, dtype=_NUMPY[t.datatype.value]))
    batchsize = args.batchsize or (feeds[0].shape[0] if feeds and feeds[0].ndim else 1)

    for _ in range(args.warmup_count):
        session.infer(feeds, mode=mode)
    summary = session.summary()
    for times in (summary.exec_time_list, summary.h2d_time_list, summary.d2h_time_list):
        times.clear()
    for _ in range(args.loop):
        session.infer(feeds, mode=mode)
    times = [end - start for start, end in summary.exec_time_list]
    session.free_resource()

    mean = float(np.mean(times))
    print("[INFO] -----------------Performance Summary------------------")
    print(_summary_line("H2D_latency", summary.h2d_time_list))
    print(_summary_line("NPU_compute_time", times))
    print(_summary_line("D2H_latency", summary.d2h_time_list))
    print(f"[INFO] throughput 1000*batchsize.mean({batchsize})/NPU_compute_time.mean({mean:.4f}): "
          f"{1000.0 * batchsize / mean:.4f}")
    print("[INFO] ------------------------------------------------------")
    return 0


if __name__ == "__main__":
    sys.exit(main())
