"""Builds the example's operators just in time (torch_npu.utils.cpp_extension.load) and runs them on npu against
the CPU: `python examples/npu_extension/run.py [build_directory]`."""
import os
import sys

import torch
import torch_npu
from torch_npu.utils.cpp_extension import load

HERE = os.path.dirname(os.path.abspath(__file__))


def build(build_directory=None):
    """Compiles csrc/npu_ops.cpp into a library of torch.ops.example_ops and loads it."""
    if build_directory:
        os.makedirs(build_directory, exist_ok=True)
    load("npu_example_ops", [os.path.join(HERE, "csrc", "npu_ops.cpp")], extra_cflags=["-O2"],
         build_directory=build_directory, is_python_module=False)


def main():
    build(sys.argv[1] if len(sys.argv) > 1 else None)
    torch.manual_seed(0)
    x, y, gate, up = (torch.randn(64, 128) for _ in range(4))
    hidden, gamma = torch.randn(4, 16, 128), torch.rand(128) + 0.5
    stream = torch.npu.Stream()
    with torch.npu.stream(stream):  # the operators run on the current stream, whichever it is
        axpy = torch.ops.example_ops.axpy(x.npu(), y.npu(), 0.5)
        swiglu = torch.ops.example_ops.swiglu(gate.npu(), up.npu())
        normed, _ = torch.ops.example_ops.rms_norm(hidden.npu(), gamma.npu(), 1e-6)
    stream.synchronize()
    axpy_error = (axpy.cpu() - (y + 0.5 * x)).abs().max().item()
    swiglu_error = (swiglu.cpu() - torch.nn.functional.silu(gate) * up).abs().max().item()
    rms = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
    rms_error = (normed.cpu() - rms).abs().max().item()
    print(f"example_ops.axpy on {axpy.device}: largest difference from the CPU {axpy_error:.3g}")
    print(f"example_ops.rms_norm on {normed.device}: largest difference from the CPU {rms_error:.3g}")
    print(f"example_ops.swiglu on {swiglu.device}: largest difference from the CPU {swiglu_error:.3g}")
    if max(axpy_error, swiglu_error, rms_error) > 1e-5:
        sys.exit("the npu results differ from the CPU's")


if __name__ == "__main__":
    main()
