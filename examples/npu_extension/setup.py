"""Builds the example's operators as torch_npu's documentation builds an extension: setuptools with
torch_npu.utils.cpp_extension.NpuExtension and torch's BuildExtension.

    python setup.py build_ext --inplace     # then: torch.ops.load_library(<the built .so>)
"""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension

from torch_npu.utils.cpp_extension import NpuExtension

setup(
    name="npu_example_ops",
    ext_modules=[NpuExtension("npu_example_ops", ["csrc/npu_ops.cpp"], extra_compile_args=["-O2"])],
    cmdclass={"build_ext": BuildExtension.with_options(no_python_abi_suffix=True)},
)
