"""Python bindings of Inductor's C++ kernels that enqueue the kernel on the current npu stream instead of running it.

Inductor's CPU backend wraps each generated ``extern "C" void kernel(...)`` in a small CPython extension
(``CppPythonBindingsCodeCache``) whose entry point parses the arguments (tensors as their data pointers, sizes as
integers) and calls the kernel. For npu the entry point parses the same arguments, copies them into a heap tuple and
hands ``kernel`` over that tuple to softnpu's runtime through ``softnpu._C._compiled_kernel_launch`` (a PyCapsule of
``softnpu_launch_compiled_kernel``, csrc/backend/ops/compiled_kernel.cpp): the kernel runs later on a compute thread,
in stream order with eager ops, extern kernels and copies, without Python or the GIL. The host returns at once.

Device pointers of npu tensors are host memory the compute threads may read (the runtime's contract for kernels), so
the CPU kernel runs on them unchanged. Buffers the wrapper frees while their kernels are queued stay valid because
the caching allocator reuses a block freed on the host only for later work on the same stream.
"""

from torch._inductor.async_compile import AsyncCompile
from torch._inductor.codecache import CppPythonBindingsCodeCache
from torch._inductor.utils import clear_on_fresh_cache

from ..npu import _sanitizer

# Placed between the binding's argument parsers and its entry point (the slot CppPythonBindingsCodeCache calls
# extra_parse_arg).
_LAUNCHER = r"""
#include <tuple>

typedef int (*__softnpu_kernel_fn)(void*);
typedef void (*__softnpu_cleanup_fn)(void*);
typedef const char* (*__softnpu_launch_fn)(int, const char*, __softnpu_kernel_fn, void*, __softnpu_cleanup_fn);

// Looked up on the first launch, under the GIL the entry point holds.
static __softnpu_launch_fn __softnpu_launcher() {
    static __softnpu_launch_fn launch = [] {
        PyObject* module = PyImport_ImportModule("softnpu._C");
        if (module == nullptr) throw std::runtime_error("softnpu._C cannot be imported");
        PyObject* capsule = PyObject_GetAttrString(module, "_compiled_kernel_launch");
        Py_DECREF(module);
        if (capsule == nullptr) throw std::runtime_error("softnpu._C has no _compiled_kernel_launch");
        void* fn = PyCapsule_GetPointer(capsule, "softnpu._C._compiled_kernel_launch");
        Py_DECREF(capsule);
        if (fn == nullptr) throw std::runtime_error("softnpu._C._compiled_kernel_launch is not its capsule");
        return reinterpret_cast<__softnpu_launch_fn>(fn);
    }();
    return launch;
}

template <typename... T> static void __softnpu_enqueue(int device, const char* name, T... args) {
    using Args = std::tuple<T...>;
    auto* packed = new Args(args...);
    const char* error = __softnpu_launcher()(
        device, name,
        [](void* p) -> int {
            try {
                std::apply(kernel, *static_cast<Args*>(p));
                return 0;
            } catch (...) {
                return 1;
            }
        },
        packed,
        [](void* p) { delete static_cast<Args*>(p); });
    if (error != nullptr) throw std::runtime_error(error);
}
"""


@clear_on_fresh_cache
class NpuCppBindingsCodeCache(CppPythonBindingsCodeCache):
    """CppPythonBindingsCodeCache whose bindings enqueue the kernel on the current npu stream."""

    cache: dict = {}

    @staticmethod
    def cache_clear() -> None:
        NpuCppBindingsCodeCache.cache.clear()

    @classmethod
    def load_launcher_async(cls, argtypes, main_code: str, kernel_name: str, device: int, submit_fn=None):
        parsed = ", ".join(f"parse_arg<{t.replace('const ', '')}>(args, {n})" for n, t in enumerate(argtypes))
        suffix = cls.suffix_template.format(
            arg_len=len(argtypes),
            call_entry_func=f'__softnpu_enqueue({device}, "{kernel_name}", {parsed}); Py_RETURN_NONE;',
            entry_func=cls.entry_function,
            extra_parse_arg=_LAUNCHER,
        )
        get_result = cls.load_async(main_code + suffix, "cpu", submit_fn=submit_fn)
        result = None

        def future():
            nonlocal result
            if result is None:
                result = _sanitizer.compiled_kernel_launch(getattr(get_result(), cls.entry_function), kernel_name,
                                                           device, argtypes)
            return result

        return future


def npu_cpp_pybinding(async_compile: AsyncCompile, kernel_name: str, device: int, argtypes, source_code: str):
    """What ``async_compile.cpp_pybinding`` is for a CPU kernel, for a kernel of npu:device: compiled in Inductor's
    compile workers when it uses them; the binding enqueues the kernel instead of running it."""
    from torch._inductor.async_compile import get_compile_threads
    from torch._inductor.codecache import LambdaFuture

    if get_compile_threads() <= 1:
        return NpuCppBindingsCodeCache.load_launcher_async(argtypes, source_code, kernel_name, device)()
    get_result = NpuCppBindingsCodeCache.load_launcher_async(
        argtypes, source_code, kernel_name, device, submit_fn=async_compile.submit)
    return LambdaFuture(get_result)
