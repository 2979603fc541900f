"""Run CUDA code unchanged on npu: ``from torch_npu.contrib import transfer_to_npu`` (or softnpu.contrib).

Importing this module patches torch for the whole process, as torch_npu's module of the same name does; code that
does not import it is unaffected. Import it right after torch: names bound earlier (``from torch import randn``)
keep the unpatched function. Importing it again, under either name, changes nothing.

The mechanism is one translation, applied by wrappers around the functions that take a device: an argument naming
a CUDA device becomes the npu device of the same index. ``"cuda"`` and ``"cuda:N"`` become ``"npu"`` and
``"npu:N"``, ``torch.device("cuda", N)`` becomes ``torch.device("npu", N)``, the values of a dict (torch.load's
``map_location``) are translated the same way, and anything else (ints, which torch already takes as npu indices,
tensors, dtypes, file names) passes through untouched. What is patched:

- ``torch.cuda``: every function and class of torch.npu's API replaces CUDA's of the same name (is_available,
  device_count, current_device, set_device, synchronize, Stream, Event, stream, current_stream, the memory
  functions, manual_seed(_all), get/set_rng_state, ...), its functions translating their device argument;
  ``torch.cuda.amp`` is torch.npu.amp (autocast, GradScaler, custom_fwd, custom_bwd, and its submodules
  autocast_mode, common, grad_scaler); the profiler's ``Kernel`` records of a CUDA device are npu's;
  ``torch.utils.cpp_extension.include_paths("cuda")`` gives npu's (torch's) paths. torch.npu's Stream and device
  classes accept CUDA devices too, since they are the same classes.
- ``.cuda()`` of tensors, modules and storages is ``.npu()``; ``Tensor.is_cuda`` is ``Tensor.is_npu``.
- Device arguments of torch's factory functions (``torch.randn(..., device="cuda")``, ``torch.tensor``,
  ``torch.zeros_like``, ...), ``torch.load`` (``map_location``), ``Tensor.to``, ``Tensor.new_*``,
  ``Tensor.pin_memory``, ``Module.to``, ``Module.to_empty``, ``torch.autocast``/``torch.amp.autocast``,
  ``torch.amp.custom_fwd``/``custom_bwd``, the ``torch.*autocast*`` queries, ``torch.amp.GradScaler`` (whose
  omitted device, "cuda" in torch, is npu), default devices (``with torch.device("cuda"):``,
  ``torch.set_default_device``).
- The forms that mean CUDA without naming it: ``torch.is_autocast_enabled()`` and
  ``torch.set_autocast_enabled(flag)`` without a device type, ``torch.get_autocast_gpu_dtype()`` and
  ``torch.set_autocast_gpu_dtype(dtype)`` are npu's.
- ``torch.load``: storages a checkpoint saved on CUDA (location ``cuda:N``) are restored on ``npu:N``, with or
  without ``map_location`` (a deserializer registered with ``torch.serialization.register_package``).
- ``torch.Generator``, ``torch.Event`` and ``torch.Stream`` (C types) are stand-ins whose constructors translate
  the device (``torch.Generator("cuda")`` is an npu generator) and against which ``isinstance`` answers as for the
  C types; ``torch.get_device_module("cuda")`` is torch.npu; ``torch.cuda.default_generators`` are npu's.
- ``TORCH_TRANSFER_TO_NPU=1`` applies all of this when softnpu loads, so a CUDA program that never imports
  torch_npu runs on npu too (``import torch`` loads softnpu).
- ``torch.distributed``: ``init_process_group`` and ``new_group`` take ``"nccl"`` as ``"hccl"`` (and
  ``"cuda:nccl"`` as ``"npu:hccl"``) and translate ``device_id``; ``is_nccl_available`` is ``is_hccl_available``;
  ``ProcessGroupNCCL`` is ``ProcessGroupHCCL``; the backend chosen by device has no CUDA entry (npu's is hccl);
  ``DistributedDataParallel`` translates ``device_ids``.
- ``torch.profiler.profile`` is torch_npu.profiler's, taking torch_npu's ``experimental_config``; another kind of
  config (neither torch_npu's nor torch's own) is dropped with a warning. ``torch._C._host_emptyCache`` is
  ``torch.npu.host_empty_cache``.
- Functions of transformers, peft, accelerate and trl that take a CUDA-only path when ``torch.cuda.is_available()``
  (the list is ``apis_config.json``, torch_npu's format) see CUDA's own answer, False, so these libraries take
  their npu path; a listed module is wrapped when it is imported.

The helpers keep torch_npu's names (``_wrapper_cuda``, ``_wrapper_hccl``, ``_wrapper_profiler``,
``_wrapper_libraries_func``, ``_replace_cuda_to_npu_in_dict``, ``_load_json_file``, ``_check_input_file_valid``,
``_del_nccl_device_backend_map``), since code written for torch_npu reaches for them.

What is not patched:

- ``torch.device("cuda")`` objects stay CUDA devices (torch.device is a C type): they are translated where they are
  passed to the functions above, but a tensor's device is ``npu``, so ``x.device == torch.device("cuda")`` and
  ``x.device.type == "cuda"`` are False (``x.is_cuda`` is True).
- Names of ``torch.cuda`` that torch.npu does not have (``nvtx``, ``graphs``/``CUDAGraph``, ...) and the
  submodules other than ``amp`` stay CUDA's, except
  ``torch.cuda.memory._record_memory_history`` / ``_snapshot`` / ``_dump_snapshot``, which are torch.npu's. ``torch.cuda.get_device_capability()`` is torch_npu's:
  None, or the ``TORCH_NPU_DEVICE_CAPABILITY`` the program sets for code that insists on a recent GPU.
- A callable ``map_location`` of ``torch.load`` is called as is, with the saved location (``"cuda:0"``;
  ``storage.cuda()`` in it is ``storage.npu()``).
- TorchScript calls ATen directly: devices named inside scripted code are not translated (``torch.compile``
  traces the wrappers, so they are).
- ``torch.nn.DataParallel`` (use DistributedDataParallel with hccl), ``torch.profiler``'s
  ``ProfilerActivity.CUDA`` (use ``ProfilerActivity.PrivateUse1``, torch_npu.profiler's ``NPU``), and
  ``dist.get_backend()``, which reports "hccl".
"""

import functools
import importlib
import importlib.abc
import importlib.metadata
import inspect
import json
import logging
import os
import re
import sys
import types

import torch
import torch.jit._builtins
import torch.utils._device
import torch.utils.cpp_extension

from .. import npu
from .. import profiler as npu_profiler

__all__: list[str] = []

_CUDA_DEVICE = re.compile(r"cuda(:\d+)?")
_MARK = "_softnpu_transfer_to_npu"


def _npu(value):
    """`value` with a CUDA device replaced by the npu device of the same index; anything else unchanged."""
    if isinstance(value, str):
        return "npu" + value[4:] if _CUDA_DEVICE.fullmatch(value) else value
    if isinstance(value, torch.device):
        return torch.device("npu", value.index) if value.type == "cuda" else value
    if isinstance(value, dict):  # torch.load's map_location: {saved location: where its storages go}
        # The CUDA keys stay too: a checkpoint saved on CUDA names its storages "cuda:N".
        return {**{key: _npu(v) for key, v in value.items()}, **_replace_cuda_to_npu_in_dict(value)}
    return value


def _replace_cuda_to_npu_in_dict(device_dict: dict) -> dict:
    """torch_npu's translation of a dict: "cuda" becomes "npu" wherever it occurs in a key or value that is a string
    ({"cuda:1": "cuda:0"} is {"npu:1": "npu:0"}), and CUDA devices among the values become npu's."""
    return {(key.replace("cuda", "npu") if isinstance(key, str) else key):
            (value.replace("cuda", "npu") if isinstance(value, str) else _npu(value))
            for key, value in device_dict.items()}


def _wrapper_cuda(fn):
    """`fn`, taking CUDA devices in any argument as npu devices, and in the lists of `device_ids` (DDP's)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        kwargs = {k: _npu(v) for k, v in kwargs.items()}
        if isinstance(kwargs.get("device_ids"), (list, tuple)):
            kwargs["device_ids"] = type(kwargs["device_ids"])(_npu(d) for d in kwargs["device_ids"])
        return fn(*[_npu(a) for a in args], **kwargs)

    return wrapper


def _scaler_init(init):
    """GradScaler.__init__ translating its device, which defaults to npu (torch's default is "cuda")."""

    @functools.wraps(init)
    def __init__(self, device="npu", *args, **kwargs):
        init(self, _npu(device), *args, **{k: _npu(v) for k, v in kwargs.items()})

    return __init__


def _npu_by_default(fn):
    """`fn` (is_autocast_enabled, set_autocast_enabled), whose form without a device type means CUDA, taking that
    form as npu's."""
    translating = _wrapper_cuda(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "device_type" not in kwargs and not (args and isinstance(args[0], (str, torch.device))):
            args = ("npu", *args)
        return translating(*args, **kwargs)

    return wrapper


def _restore_cuda_storage(storage, location: str):
    """torch.load's deserializer for a checkpoint saved on CUDA: storages of ``cuda:N`` go to ``npu:N``."""
    if not _CUDA_DEVICE.fullmatch(location):
        return None
    return torch.serialization.default_restore_location(storage, _npu(location))


setattr(_restore_cuda_storage, _MARK, True)


def _register_cuda_restore() -> None:
    """Registers _restore_cuda_storage ahead of torch's CUDA deserializer (priority 20), once."""
    registry = torch.serialization._package_registry
    if any(getattr(deserializer, _MARK, False) for _, _, deserializer in registry):
        return
    taken = {priority for priority, _, _ in registry}
    # The registry is a sorted list of tuples: a priority already taken would compare the functions.
    priority = next(p for p in range(19, 10, -1) if p not in taken)
    torch.serialization.register_package(priority, lambda storage: None, _restore_cuda_storage)


def _hccl(backend: str) -> str:
    """A backend spec ("nccl", "cuda:nccl", "cpu:gloo,cuda:nccl") with HCCL on npu where it had NCCL on CUDA."""
    parts = []
    for part in backend.split(","):
        device, sep, name = part.rpartition(":")
        device = "npu" if device.strip() == "cuda" else device
        name = "hccl" if name.strip().lower() == "nccl" else name
        parts.append(device + sep + name)
    return ",".join(parts)


def _wrapper_hccl(fn):
    """`fn` (a torch.distributed function with a `backend` argument) taking NCCL as HCCL, as torch_npu's wrapper does:
    in the `backend` keyword and in every positional string (the other positional strings, init_method's URLs, have
    no "nccl" part to change), and CUDA devices as npu."""
    translating = _wrapper_cuda(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = [_hccl(a) if isinstance(a, str) else a for a in args]
        if isinstance(kwargs.get("backend"), str):
            kwargs["backend"] = _hccl(kwargs["backend"])
        return translating(*args, **kwargs)

    return wrapper


def _del_nccl_device_backend_map() -> None:
    """Drops CUDA from the backends torch.distributed picks by device, so a group made without a backend (and
    init_device_mesh("cuda"), translated to npu) does not ask for NCCL: npu's entry (hccl) serves instead."""
    backend_map = getattr(torch.distributed.Backend, "default_device_backend_map", None)
    if backend_map is not None:
        backend_map.pop("cuda", None)


def _wrapper_profiler(fn):
    """`fn` (torch.profiler.profile, npu's) dropping, with a warning, an `experimental_config` that is neither npu's
    nor torch's own (CUDA code's CUPTI settings come from elsewhere), as torch_npu does."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        config = kwargs.get("experimental_config")
        if config is not None and not isinstance(config, (npu_profiler._ExperimentalConfig,
                                                          torch._C._profiler._ExperimentalConfig)):
            logging.warning("The parameter experimental_config of torch.profiler.profile has been removed by "
                            "transfer_to_npu: it is not a torch_npu.profiler._ExperimentalConfig.")
            del kwargs["experimental_config"]
        return fn(*args, **kwargs)

    return wrapper


# Functions of libraries that choose a CUDA-only path when torch.cuda.is_available() is True: they keep CUDA's own
# answer (False), so the library takes its npu path or its CPU one (torch_npu's apis_config.json, same format).
_LIBRARIES_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apis_config.json")
_MAX_CONFIG_BYTES = 10 * 1024 ** 2
_MAX_CONFIG_NAME = 200
_cuda_is_available = torch.cuda.is_available


def _check_input_file_valid(file_path: str) -> bool:
    """Whether `file_path` may be read as a configuration: not a symbolic link, existing, readable, a name of at most
    200 characters and at most 10 MiB (torch_npu's checks)."""
    if os.path.islink(os.path.abspath(file_path)):
        return False
    path = os.path.realpath(file_path)
    return (os.path.exists(path) and os.access(path, os.R_OK) and len(os.path.basename(path)) <= _MAX_CONFIG_NAME
            and os.path.getsize(path) <= _MAX_CONFIG_BYTES)


def _load_json_file(file_path: str) -> dict:
    """The JSON object in `file_path`; {} when the file fails _check_input_file_valid, is not JSON, or holds
    something other than an object."""
    if not _check_input_file_valid(file_path):
        return {}
    try:
        with open(file_path) as f:
            content = json.load(f)
    except json.JSONDecodeError:
        return {}
    return content if isinstance(content, dict) else {}


def _wrapper_libraries_func(fn):
    """`fn`, during which torch.cuda.is_available is CUDA's own again."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        patched = torch.cuda.is_available
        torch.cuda.is_available = _cuda_is_available
        try:
            return fn(*args, **kwargs)
        finally:
            torch.cuda.is_available = patched

    return wrapper


def _version(text: str) -> tuple:
    """A release's number as a comparable tuple ("4.32.0" is (4, 32, 0); a suffix such as ".dev0" is ignored)."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def _wrap_library_api(module, name: str, kind: str) -> None:
    """Wraps `name` ("module.function" or "module.Class.method", `kind` "function" or "method") of the imported
    `module`; a name the installed release lacks is skipped."""
    owner = getattr(module, name.split(".")[-2]) if kind == "method" else module
    fn = getattr(owner, name.split(".")[-1], None)
    if fn is not None and not getattr(fn, _MARK, False):
        wrapped = _wrapper_libraries_func(fn)
        setattr(wrapped, _MARK, True)
        setattr(owner, name.split(".")[-1], wrapped)


class _LibraryApiFinder(importlib.abc.MetaPathFinder):
    """Wraps the listed functions of a module when it is imported: importing the libraries (transformers' trainer,
    accelerate) here, as torch_npu does, would cost every program seconds, used or not."""

    def __init__(self, apis: dict[str, list[tuple[str, str]]]):
        self.apis = apis  # {module name: [(name, kind)]}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.apis:
            return None
        for finder in sys.meta_path:  # the spec the other finders give, its loader wrapping after executing
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                exec_module, apis = spec.loader.exec_module, self.apis[fullname]

                def exec_and_wrap(module):
                    exec_module(module)
                    for name, kind in apis:
                        _wrap_library_api(module, name, kind)

                spec.loader.exec_module = exec_and_wrap
                return spec
            if spec is not None:
                return None
        return None


def _do_wrapper_libraries_func(config: dict) -> None:
    """Applies _wrapper_libraries_func to the functions `config` lists: {package: {"version": the first release
    concerned, "apis": {"module.function" or "module.Class.method": "function" or "method"}}}, for each package
    installed at that version or later; now for the modules already imported, at their import for the others."""
    apis: dict[str, list[tuple[str, str]]] = {}
    for package, entry in config.items():
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
        if not isinstance(entry, dict) or not entry.get("version") or _version(installed) < _version(entry["version"]):
            continue
        for name, kind in entry.get("apis", {}).items():
            module = name.rsplit(".", 2 if kind == "method" else 1)[0]
            apis.setdefault(module, []).append((name, kind))
    for module in [m for m in apis if m in sys.modules]:
        for name, kind in apis.pop(module):
            _wrap_library_api(sys.modules[module], name, kind)
    if apis and not any(isinstance(f, _LibraryApiFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _LibraryApiFinder(apis))


def _translating_type(cls):
    """A stand-in for the C type `cls` (torch.Generator, torch.Event, torch.Stream): constructing it takes CUDA
    devices as npu and makes a `cls`; isinstance and issubclass answer for `cls`, so the objects torch itself makes
    keep passing checks written against the stand-in (TorchScript and Dynamo accept it too)."""

    class Meta(type(cls)):
        def __instancecheck__(self, obj):
            return isinstance(obj, cls)

        def __subclasscheck__(self, sub):
            return issubclass(sub, cls)

    def __new__(_, *args, **kwargs):
        return cls(*[_npu(a) for a in args], **{k: _npu(v) for k, v in kwargs.items()})

    return Meta(cls.__name__, (cls,), {"__new__": __new__, "__doc__": cls.__doc__, "__module__": cls.__module__,
                                        _MARK: True})


def _cuda_module_getattr(name: str):
    """torch.cuda's module __getattr__: default_generators is npu's, read when asked (reading starts the runtime)."""
    if name == "default_generators":
        return npu.default_generators
    raise AttributeError(f"module 'torch.cuda' has no attribute '{name}'")


def _patch(owner, names, make=_wrapper_cuda) -> None:
    """Replaces each `owner.name` by `make(owner.name)`, once (a second import finds the mark and leaves it)."""
    for name in names:
        current = inspect.getattr_static(owner, name)
        static = isinstance(current, staticmethod)  # __new__
        fn = current.__func__ if static else current
        if getattr(fn, _MARK, False):
            continue
        wrapped = make(fn)
        setattr(wrapped, _MARK, True)
        # TorchScript compiles a call to a builtin as its ATen op: make it see the wrapper as the same op.
        op = torch.jit._builtins._find_builtin(fn)
        if op is not None:
            torch.jit._builtins._register_builtin(wrapped, op)
        setattr(owner, name, staticmethod(wrapped) if static else wrapped)


# torch's functions that take a device: every public one whose ATen schema has a `device` argument
# (tests/test_transfer_to_npu.py checks the list against torch's schemas), torch.asarray, and torch.load.
_TORCH_FUNCTIONS = (
    "arange", "as_tensor", "asarray", "bartlett_window", "blackman_window", "empty", "empty_like", "empty_permuted",
    "empty_quantized", "empty_strided", "eye", "from_file", "full", "full_like", "hamming_window", "hann_window",
    "kaiser_window", "linspace", "logspace", "normal", "ones", "ones_like", "rand", "rand_like", "randint",
    "randint_like", "randn", "randn_like", "randperm", "range", "scalar_tensor", "sparse_bsc_tensor",
    "sparse_bsr_tensor", "sparse_compressed_tensor", "sparse_coo_tensor", "sparse_csc_tensor", "sparse_csr_tensor",
    "tensor", "tril_indices", "triu_indices", "zeros", "zeros_like", "load",
    # autocast's queries and settings take a device type
    "get_autocast_dtype", "set_autocast_dtype",
)
# ... or omit it, meaning CUDA: is_autocast_enabled(), set_autocast_enabled(True)
_AUTOCAST_CUDA_BY_DEFAULT = ("is_autocast_enabled", "set_autocast_enabled")
# torch.cuda.memory's names CUDA code calls to find what holds memory (the rest of torch.cuda.memory stays CUDA's).
_MEMORY_DEBUGGING = ("_record_memory_history", "_snapshot", "_dump_snapshot")
_TENSOR_METHODS = ("to", "new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros",
                   "pin_memory", "is_pinned")


_AMP_SUBMODULES = ("autocast_mode", "common", "grad_scaler")


def _install() -> None:
    # torch.cuda answers with torch.npu. default_generators is read when asked: reading it starts the runtime.
    if "default_generators" in vars(torch.cuda):
        del torch.cuda.default_generators
        torch.cuda.__getattr__ = _cuda_module_getattr
    for name in npu.__all__:
        value = getattr(npu, name)
        if name == "default_generators" or isinstance(value, types.ModuleType):  # submodules: below
            continue
        setattr(torch.cuda, name, _wrapper_cuda(value) if callable(value) and not isinstance(value, type) else value)
    for name in _MEMORY_DEBUGGING:
        setattr(torch.cuda.memory, name, getattr(npu.memory, name))
    for name in npu.amp.__all__:
        setattr(torch.cuda.amp, name, getattr(npu.amp, name))
    for name in _AMP_SUBMODULES:  # torch.cuda.amp's submodules are torch.npu.amp's, as torch_npu makes them
        setattr(torch.cuda.amp, name, getattr(npu.amp, name))
    _patch(npu.Stream, ["__new__"])
    _patch(npu.device, ["__init__"])
    torch._C._host_emptyCache = npu.host_empty_cache  # torch.cuda.graphs releases pinned memory through it

    # torch.profiler.profile is npu's (taking torch_npu's experimental_config), as torch_npu makes it.
    _patch(npu_profiler.profile, ["__init__"], _wrapper_profiler)
    torch.profiler.profile = npu_profiler.profile

    # .cuda() is .npu()
    torch.Tensor.cuda = _wrapper_cuda(torch.Tensor.npu)
    torch.Tensor.is_cuda = torch.Tensor.is_npu
    torch.nn.Module.cuda = _wrapper_cuda(torch.nn.Module.npu)
    torch.UntypedStorage.cuda = _wrapper_cuda(torch.UntypedStorage.npu)
    torch.TypedStorage.cuda = _wrapper_cuda(torch.TypedStorage.npu)

    # Device arguments. The default-device mode (`with torch.device(...)`, set_default_device) recognizes factory
    # functions by identity in a set it builds once: build it now, from the unwrapped functions it will be handed.
    torch.utils._device._device_constructors()
    _patch(torch, _TORCH_FUNCTIONS)
    _patch(torch, ["get_device_module"])
    for name in ("Generator", "Event", "Stream"):
        if not getattr(getattr(torch, name), _MARK, False):
            setattr(torch, name, _translating_type(getattr(torch, name)))
    _patch(torch.fft, ["fftfreq", "rfftfreq"])
    # The legacy profiler's kernel records name their device: a CUDA kernel's is npu's.
    _patch(torch.autograd.profiler_util.Kernel, ["__new__"])
    # An extension built for "cuda" gets npu's include paths (torch's, without CUDA_HOME's).
    _patch(torch.utils.cpp_extension, ["include_paths"])
    _patch(torch.Tensor, _TENSOR_METHODS)
    _patch(torch.nn.Module, ["to", "to_empty"])
    _patch(torch.utils._device.DeviceContext, ["__init__"])
    _patch(torch.amp.autocast, ["__init__"])  # torch.autocast is the same class
    _patch(torch.amp, ["custom_fwd", "custom_bwd", "is_autocast_available"])
    _patch(torch, _AUTOCAST_CUDA_BY_DEFAULT, _npu_by_default)
    torch.get_autocast_gpu_dtype = functools.wraps(torch.get_autocast_gpu_dtype)(
        lambda: torch.get_autocast_dtype("npu"))
    torch.set_autocast_gpu_dtype = functools.wraps(torch.set_autocast_gpu_dtype)(
        lambda dtype: torch.set_autocast_dtype("npu", dtype))
    _register_cuda_restore()
    _do_wrapper_libraries_func(_load_json_file(_LIBRARIES_CONFIG))
    _patch(torch.amp.GradScaler, ["__init__"], _scaler_init)

    if torch.distributed.is_available():
        import torch.distributed as dist

        from .. import distributed as npu_distributed

        _patch(dist, ["init_process_group", "new_group"], _wrapper_hccl)
        dist.is_nccl_available = dist.is_hccl_available
        # ProcessGroupNCCL (and its Options) is the hccl backend's process group, as torch_npu makes it.
        dist.ProcessGroupNCCL = dist.distributed_c10d.ProcessGroupNCCL = npu_distributed.ProcessGroupHCCL
        _del_nccl_device_backend_map()
        _patch(torch.nn.parallel.DistributedDataParallel, ["__init__"])


_install()
