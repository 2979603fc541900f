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
from .vec_mask import with_vec_mask

# Placed between the binding's argument parsers and its entry point (the slot CppPythonBindingsCodeCache calls
# extra_parse_arg).
_LAUNCHER = r"""
#include <cstdint>
#include <tuple>

typedef int (*__softnpu_kernel_fn)(void*);
typedef void (*__softnpu_cleanup_fn)(void*);
typedef const char* (*__softnpu_launch_fn)(int, const char*, __softnpu_kernel_fn, void*, __softnpu_cleanup_fn);
typedef void (*__softnpu_threads_fn)(uint64_t);

// softnpu._C's capsule of that name, looked up on the first launch, under the GIL the entry point holds.
static void* __softnpu_capsule(const char* attribute, const char* capsule_name) {
    PyObject* module = PyImport_ImportModule("softnpu._C");
    if (module == nullptr) throw std::runtime_error("softnpu._C cannot be imported");
    PyObject* capsule = PyObject_GetAttrString(module, attribute);
    Py_DECREF(module);
    if (capsule == nullptr) throw std::runtime_error(std::string("softnpu._C has no ") + attribute);
    void* fn = PyCapsule_GetPointer(capsule, capsule_name);
    Py_DECREF(capsule);
    if (fn == nullptr) throw std::runtime_error(std::string("softnpu._C.") + attribute + " is not its capsule");
    return fn;
}

static __softnpu_launch_fn __softnpu_launcher() {
    static auto launch = reinterpret_cast<__softnpu_launch_fn>(
        __softnpu_capsule("_compiled_kernel_launch", "softnpu._C._compiled_kernel_launch"));
    return launch;
}

static __softnpu_threads_fn __softnpu_threads() {
    static auto threads = reinterpret_cast<__softnpu_threads_fn>(
        __softnpu_capsule("_compiled_kernel_threads", "softnpu._C._compiled_kernel_threads"));
    return threads;
}

// A CPU scalar's value, copied when the kernel is enqueued (the CPU tensor may be freed and its memory reused before
// the kernel runs); the kernel reads it through a pointer into the launch record.
template <typename T> struct __softnpu_host_scalar {
    T value;
    operator const T*() const { return &value; }
};
template <typename T> static __softnpu_host_scalar<T> __softnpu_host_value(const T* p) { return {*p}; }

// work_bytes: what the kernel's buffers hold, for the runtime's thread budget.
template <typename... T> static void __softnpu_enqueue(int device, const char* name, uint64_t work_bytes, T... args) {
    using Args = std::tuple<T...>;
    auto* packed = new std::pair<uint64_t, Args>(work_bytes, Args(args...));
    static const __softnpu_threads_fn set_threads = __softnpu_threads();  // static: the kernel below captures nothing
    const char* error = __softnpu_launcher()(
        device, name,
        [](void* p) -> int {
            auto* launch = static_cast<std::pair<uint64_t, Args>*>(p);
            try {
                set_threads(launch->first);
                std::apply(kernel, launch->second);
                return 0;
            } catch (...) {
                return 1;
            }
        },
        packed,
        [](void* p) { delete static_cast<std::pair<uint64_t, Args>*>(p); });
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
    def load_launcher_async(cls, argtypes, main_code: str, kernel_name: str, device: int, work_bytes: int,
                            host_scalars: tuple, submit_fn=None):
        parsed = [f"parse_arg<{t.replace('const ', '')}>(args, {n})" for n, t in enumerate(argtypes)]
        for n in host_scalars:
            parsed[n] = f"__softnpu_host_value({parsed[n]})"
        parsed = ", ".join(parsed)
        suffix = cls.suffix_template.format(
            arg_len=len(argtypes),
            call_entry_func=f'__softnpu_enqueue({device}, "{kernel_name}", {work_bytes}ULL, {parsed}); Py_RETURN_NONE;',
            entry_func=cls.entry_function,
            extra_parse_arg=_LAUNCHER,
        )
        get_result = cls.load_async(with_vec_mask(main_code) + suffix, "cpu", submit_fn=submit_fn)
        result = None

        def future():
            nonlocal result
            if result is None:
                result = _sanitizer.compiled_kernel_launch(getattr(get_result(), cls.entry_function), kernel_name,
                                                           device, argtypes)
            return result

        return future


def npu_cpp_pybinding(async_compile: AsyncCompile, kernel_name: str, device: int, work_bytes: int,
                      host_scalars: tuple, argtypes, source_code: str):
    """What ``async_compile.cpp_pybinding`` is for a CPU kernel, for a kernel of npu:device: compiled in Inductor's
    compile workers when it uses them; the binding enqueues the kernel instead of running it. work_bytes (the bytes of
    the kernel's buffers) sets its threads as the runtime's budget grants them for that much work; the arguments at
    the positions host_scalars are CPU tensors of one element, whose values the binding copies."""
    from torch._inductor.async_compile import get_compile_threads
    from torch._inductor.codecache import LambdaFuture

    if get_compile_threads() <= 1:
        return NpuCppBindingsCodeCache.load_launcher_async(argtypes, source_code, kernel_name, device, work_bytes,
                                                           host_scalars)()
    get_result = NpuCppBindingsCodeCache.load_launcher_async(
        argtypes, source_code, kernel_name, device, work_bytes, host_scalars, submit_fn=async_compile.submit)
    return LambdaFuture(get_result)
