"""torch_npu.utils.cpp_extension: building C++ extensions against torch_npu's C++ API (csrc/torch_npu_api).

torch_npu's headers are in torch_npu/include (with ACL's under third_party/acl/inc), libtorch_npu.so in torch_npu/lib,
and CANN's libascendcl.so and libopapi.so in the toolkit tree's lib64 (ASCEND_HOME_PATH). Importing torch_npu loads
the three libraries (load_libraries), so an extension linked -ltorch_npu -lascendcl -- with these helpers, with
torch.utils.cpp_extension.load given the flags itself (DeepSpeed's npu op builders), or by setup.py -- resolves them
in the process without an LD_LIBRARY_PATH, and `dlopen("libopapi.so")` finds the loaded one.

- NpuExtension(name, sources, ...): a setuptools.Extension with torch's and torch_npu's include and library paths and
  libraries (c10, torch, torch_cpu, torch_python, torch_npu), for setup(..., cmdclass={"build_ext": BuildExtension}).
- load(name, sources, ...): torch.utils.cpp_extension.load with torch_npu's include path and -ltorch_npu added.
- include_paths() / library_paths(): torch_npu's (and ACL's) directories.
"""

import ctypes
import os

from softnpu import cann

PYTORCH_NPU_INSTALL_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "torch_npu")

__all__ = ["NpuExtension", "load", "include_paths", "library_paths", "PYTORCH_NPU_INSTALL_PATH"]

_LIBRARIES = [os.path.join(PYTORCH_NPU_INSTALL_PATH, "lib", "libtorch_npu.so"),
              os.path.join(cann.TOOLKIT, "lib64", "libopapi.so")]
_loaded = []


def load_libraries():
    """Loads libtorch_npu.so (which loads libascendcl.so) and libopapi.so into the process, once."""
    if not _loaded:
        _loaded.extend(ctypes.CDLL(path) for path in _LIBRARIES)


def include_paths():
    """torch_npu's include directory and ACL's (third_party/acl/inc) under it."""
    return [os.path.join(PYTORCH_NPU_INSTALL_PATH, "include"),
            os.path.join(PYTORCH_NPU_INSTALL_PATH, "include", "third_party", "acl", "inc")]


def library_paths():
    """torch_npu's lib directory and the CANN toolkit's lib64 (libascendcl.so, libopapi.so)."""
    return [os.path.join(PYTORCH_NPU_INSTALL_PATH, "lib"), os.path.join(cann.TOOLKIT, "lib64")]


def NpuExtension(name, sources, *args, **kwargs):
    """A setuptools.Extension for C++ against torch and torch_npu: as torch.utils.cpp_extension.CppExtension, plus
    torch_npu's include and library directories and -ltorch_npu. Arguments are setuptools.Extension's."""
    import setuptools
    import torch.utils.cpp_extension as torch_extension

    kwargs["include_dirs"] = list(kwargs.get("include_dirs", [])) + include_paths() + torch_extension.include_paths()
    kwargs["library_dirs"] = list(kwargs.get("library_dirs", [])) + library_paths() + torch_extension.library_paths()
    kwargs["libraries"] = list(kwargs.get("libraries", [])) + ["c10", "torch", "torch_cpu", "torch_python",
                                                               "torch_npu"]
    kwargs["language"] = "c++"
    return setuptools.Extension(name, sources, *args, **kwargs)


def load(name, sources, extra_cflags=None, extra_ldflags=None, extra_include_paths=None, build_directory=None,
         verbose=False, is_python_module=True, is_standalone=False, keep_intermediates=True):
    """torch.utils.cpp_extension.load (a JIT-built extension) with torch_npu's headers and -ltorch_npu."""
    import torch.utils.cpp_extension as torch_extension

    extra_ldflags = list(extra_ldflags or [])
    if not isinstance(extra_ldflags, list):
        raise RuntimeError(f"arg extra_ldflags should be None or List[str], not {type(extra_ldflags)}")
    extra_ldflags += [f"-L{path}" for path in library_paths()] + ["-ltorch_npu"]
    extra_include_paths = list(extra_include_paths or []) + include_paths()
    return torch_extension.load(name, sources, extra_cflags=extra_cflags, extra_ldflags=extra_ldflags,
                                extra_include_paths=extra_include_paths, build_directory=build_directory,
                                verbose=verbose, is_python_module=is_python_module, is_standalone=is_standalone,
                                keep_intermediates=keep_intermediates)
