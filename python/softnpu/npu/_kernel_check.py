"""torch_npu.npu._kernel_check: the sanitizer's kernel check (TORCH_NPU_SANITIZER=1 with ASCEND_OPP_DEBUG_PATH set).

On Ascend it runs every operator with debug builds of CANN's kernels: ``KernelPathManager`` copies the operator
package (ASCEND_OPP_PATH) to ``./opp_debug_path`` with its ``built-in/op_impl/ai_core/tbe/kernel`` directory replaced by
a link to ASCEND_OPP_DEBUG_PATH's, points ASCEND_OPP_PATH at the copy and asks for blocking launches; ``EventHandler``
prints each operator's start and, once it finished, the Python stack that launched it, so a debug kernel's report can
be placed. The tree is prepared (and removed at exit) as on Ascend; softnpu's kernels are ATen's CPU kernels, not the
operator package's binaries, so the debug kernels themselves are not run here: the check traces each npu op (its aten
name) through ``KernelCheckDispatchMode``, and each kernel torch.compile built (``traced_launch``), waiting for the
op's stream before reporting its end.
"""

import fcntl
import os
import shutil
import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils import _pytree as pytree

from .. import npu_trace as _npu_trace
from ..print_log import _print_error_log, _print_info_log, _print_warn_log

# Where a CANN operator package keeps the AI core kernels (relative to the package's root).
_KERNEL_DIR = os.path.join("built-in", "op_impl", "ai_core", "tbe", "kernel")


class EventHandler:
    """The kernel check's callbacks (torch_npu.utils._npu_trace's acl start/finish execution)."""

    def _handle_acl_start_execution(self, acl_name: str) -> None:
        _npu_trace.print_check_msg(f"====== Start acl operator {acl_name}")

    def _handle_acl_finish_execution(self, acl_name: str) -> None:
        stack = traceback.StackSummary.extract(traceback.walk_stack(None), lookup_lines=False)
        stack.reverse()  # walk_stack goes from the innermost frame out
        _npu_trace.print_check_msg(f"====== {acl_name} python stack info:\n{''.join(stack.format())}")


class KernelPathManager:
    """The debug copy of the operator package in the working directory, made and removed under a file lock (ranks of
    one job share the directory: the first one makes it)."""

    def __init__(self) -> None:
        self.folder_permission = 0o750
        self.ascend_opp_path = os.getenv("ASCEND_OPP_PATH")
        self.opp_debug_path = os.path.join(os.getcwd(), "opp_debug_path")
        self.opp_debug_kernel_path = os.getenv("ASCEND_OPP_DEBUG_PATH")
        self.func_with_lock(self.make_opp_debug_path)
        os.environ["ASCEND_LAUNCH_BLOCKING"] = "1"
        os.environ["ASCEND_OPP_PATH"] = self.opp_debug_path

    @staticmethod
    def _lock_file() -> str:
        return os.path.join(os.getcwd(), "opp_debug.lock")

    def func_with_lock(self, func: Callable[[], None]) -> None:
        """Runs func holding the lock; if another process holds it, that process does the work and this one skips."""
        fd = os.open(self._lock_file(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                func()
            except IOError:
                _print_warn_log(f"Permission denied to execute {func}")
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def make_opp_debug_path(self) -> None:
        if not os.path.exists(self.ascend_opp_path):
            _print_error_log("ASCEND_OPP_PATH is not exists.")
            return
        if not os.path.exists(self.opp_debug_kernel_path):
            _print_error_log("ASCEND_OPP_DEBUG_PATH is not exists.")
            return
        debug_kernels = os.path.join(self.opp_debug_kernel_path, _KERNEL_DIR)
        if not os.path.exists(debug_kernels):
            _print_warn_log("ASCEND_OPP_DEBUG_PATH is not valid kernel path.")
            return
        kernels = os.path.join(self.opp_debug_path, _KERNEL_DIR)
        # A copy left by an earlier run: unlink its kernel link first, so rmtree does not follow it.
        if os.path.islink(kernels):
            os.unlink(kernels)
        if os.path.exists(self.opp_debug_path):
            shutil.rmtree(self.opp_debug_path)
        shutil.copytree(self.ascend_opp_path, self.opp_debug_path)
        os.chmod(self.opp_debug_path, self.folder_permission)
        if os.path.islink(kernels):
            os.unlink(kernels)
        elif os.path.exists(kernels):
            shutil.rmtree(kernels)
        os.makedirs(os.path.dirname(kernels), exist_ok=True)
        os.symlink(debug_kernels, kernels)

    def remove_debug_files(self) -> None:
        os.unlink(os.path.join(self.opp_debug_path, _KERNEL_DIR))
        shutil.rmtree(self.opp_debug_path)

    def clear_debug_env(self) -> None:
        if not os.path.exists(self.opp_debug_path):
            return
        self.func_with_lock(self.remove_debug_files)
        try:
            os.remove(self._lock_file())
        except FileNotFoundError as err:
            _print_info_log(err)


def _npu_device(args, kwargs) -> "int | None":
    """The npu device an op runs on: that of its first npu tensor, or of its device argument (a factory)."""
    for value in pytree.tree_leaves((args, kwargs)):
        if isinstance(value, torch.Tensor) and value.device.type == "npu":
            return value.device.index
        if isinstance(value, torch.device) and value.type == "npu":
            return value.index if value.index is not None else torch.npu.current_device()
    return None


def _traced(name: str, device: int, run: Callable[[], Any]) -> Any:
    """Runs one op on the device, reporting its start and, once its stream has run it, its end (torch_npu.utils.
    _npu_trace's acl start/finish execution)."""
    _npu_trace.NPUACLStartExecuteCallbacks.fire_callbacks(name)
    result = run()
    torch.npu.current_stream(device).synchronize()
    _npu_trace.NPUACLFinishExecuteCallbacks.fire_callbacks(name)
    return result


def traced_launch(launch: Callable, kernel_name: str, device: int) -> Callable:
    """The binding of a kernel torch.compile built, traced as an op."""
    return lambda *args: _traced(kernel_name, device, lambda: launch(*args))


class KernelCheckDispatchMode(TorchDispatchMode):
    """Traces every op on npu tensors."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # torch.compile still compiles under the check: its kernels are traced through traced_launch.
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = _npu_device(args, kwargs)
        if device is None:
            return func(*args, **kwargs)
        return _traced(func.name(), device, lambda: func(*args, **kwargs))
