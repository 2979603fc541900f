/*
 * softnpu runtime: the seam between PyTorch integration and the device.
 *
 * Everything above this header (csrc/backend, the tools) reaches the device only through these calls; a vendor with
 * real silicon could reimplement this header and keep every layer above it. The software implementation in
 * csrc/runtime/src executes kernels and copies on host threads, against device memory it owns.
 *
 * Conventions
 *  - Every call returns snpuError_t. On failure, snpuGetLastErrorMessage() gives a readable message for the calling
 *    thread, valid until that thread's next runtime call.
 *  - SYNC: the work is complete when the call returns. ASYNC: the call enqueues the work on a stream and returns;
 *    the work runs later, in stream order. Under ASCEND_LAUNCH_BLOCKING=1 every ASYNC call also waits for its work
 *    and returns a kernel's error itself.
 *  - Every call initializes the runtime on first use (snpuInit), except the queries that say they do not (the fork
 *    and initialization checks, the device count); a malformed environment variable makes that call fail with
 *    snpuErrorInvalidConfig, naming the variable.
 *  - Fork. The runtime's compute threads do not exist in a child forked after the runtime was initialized, so in
 *    such a child every call fails at once with snpuErrorForked (nothing waits for work that would never run) and
 *    the parent's handles and memory stay untouched. A child forked before initialization (or after
 *    snpuShutdown) initializes its own runtime as usual.
 *  - The current device is per host thread (default 0). A NULL stream means the default stream of the current
 *    device.
 *  - Kernel errors. A kernel that fails records its name and message on its stream; the stream stays usable and
 *    later work runs as usual. The error is reported once, by the first synchronizing call that covers it
 *    (snpuStreamSynchronize, snpuEventSynchronize on a later event of that stream, snpuDeviceSynchronize, a SYNC
 *    copy on that stream), which returns snpuErrorKernelFailed; snpuGetLastKernelError() then gives the details.
 */
#ifndef SOFTNPU_RUNTIME_H
#define SOFTNPU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define SNPU_API
#else
#define SNPU_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */

typedef enum snpuError {
  snpuSuccess = 0,
  snpuErrorNotReady = 1,         /* query: the work is not complete yet (not a failure) */
  snpuErrorInvalidValue = 2,     /* a null or out-of-range argument */
  snpuErrorInvalidDevice = 3,    /* a device index that does not exist */
  snpuErrorMemoryAllocation = 4, /* device or pinned memory exhausted */
  snpuErrorInvalidHandle = 5,    /* a stream or event that was destroyed or never created */
  snpuErrorInvalidPointer = 6,   /* a pointer the runtime did not allocate, or the wrong kind for the call */
  snpuErrorKernelFailed = 7,     /* a kernel on the stream failed; see snpuGetLastKernelError */
  snpuErrorInvalidConfig = 8,    /* a malformed environment variable */
  snpuErrorNotPermitted = 9,     /* the call is not allowed here (e.g. synchronizing from inside a kernel) */
  snpuErrorInternal = 10,
  snpuErrorForked = 11,          /* a child forked after the runtime was initialized cannot use it (see Fork) */
  snpuErrorStreamCaptureUnsupported = 12, /* not permitted while a stream captures (see Graphs); invalidates it */
  snpuErrorStreamCaptureInvalidated = 13, /* the capture was invalidated by an earlier illegal call */
  snpuErrorInterrupted = 14               /* a host wait abandoned at the interrupt check's request */
} snpuError_t;

/* SYNC. Readable name of an error code ("snpuErrorMemoryAllocation"). Never NULL. */
SNPU_API const char* snpuGetErrorName(snpuError_t error);

/* SYNC. Message of the calling thread's last failed call (empty if none). Valid until its next runtime call. */
SNPU_API const char* snpuGetLastErrorMessage(void);

/* SYNC. Details of the kernel failure most recently reported to this thread by snpuErrorKernelFailed: the
 * kernel's name, its message, the code the kernel returned, the device and stream id it ran on. Pointers are valid
 * until the thread's next runtime call. Any out-parameter may be NULL. snpuErrorInvalidValue if none was reported. */
SNPU_API snpuError_t snpuGetLastKernelError(const char** kernel_name, const char** message, int* code,
                                            int* device, uint64_t* stream_id);

/* ---------------------------------------------------------------- interrupting host waits
 *
 * A host thread blocked in the runtime calls the process's interrupt check every 20 ms while it waits: a launch of
 * any kind (kernel, copy, memset, event wait, graph) waiting for room in a full queue; snpuStreamSynchronize,
 * snpuEventSynchronize, snpuDeviceSynchronize (and their timed forms); snpuMemcpy and a copy into pageable host
 * memory while they wait for the work queued before them. A nonzero return abandons the wait: the call returns
 * snpuErrorInterrupted. An interrupted launch enqueued nothing (a kernel's cleanup has run); an interrupted
 * synchronizing call or copy leaves the work queued, to complete in stream order. Never interrupted: the wait for a
 * copy into host memory once it is queued, and the waits of snpuFree, snpuStreamDestroy and snpuShutdown. The check
 * runs on the waiting thread (so it may keep a thread-local reason); NULL removes it. */
typedef int (*snpuInterruptCheckFn)(void);
/* SYNC. Installs the interrupt check of every later wait. Never fails; does not initialize the runtime. */
SNPU_API snpuError_t snpuSetInterruptCheck(snpuInterruptCheckFn check);

/* ---------------------------------------------------------------- faults on demand
 *
 * The chip's failures, injected so that recovery code can be tested; each enters where the real one does and fails
 * with Ascend's error code (a kernel error reported at the next synchronizing call, as snpuErrorKernelFailed with the
 * code in snpuGetLastKernelError). Counts start at the injection: at == 1 is the next matching event.
 *  - snpuFaultKernelError: the at-th kernel run on the device (stream_id, or any stream if -1) fails with code
 *    (default SNPU_ACL_ERROR_RT_AICORE_EXCEPTION) and message. Once.
 *  - snpuFaultMemoryUce: an uncorrectable memory error in [ptr, ptr + size) of the device, from now until
 *    snpuDeviceRestart repairs the device (at is not used): every copy reading the range fails with
 *    SNPU_ACL_ERROR_RT_DEVICE_MEM_ERROR ("UCE ERROR"), and so does every kernel touching it, which kernels learn from
 *    snpuMemRangeHasUce (the kernels of torch's op path ask it for each operand); kernels not touching it run as
 *    usual. snpuDeviceGetUceInfo lists the range.
 *  - snpuFaultDeviceHang: from the at-th task on, the device's tasks stop completing (host waits block, interruptibly)
 *    until snpuDeviceStop.
 *  - snpuFaultOutOfMemory: the at-th device allocation (snpuMalloc, snpuMemMap) of at least size bytes fails with
 *    snpuErrorMemoryAllocation, and so does every allocation of that size or larger until a smaller one succeeds
 *    (a caching allocator's retries after freeing its cache fail, as against a full device).
 *  - snpuFaultSlow: every kernel on the device starts delay_us late (a slow rank), until snpuFaultClear.
 * device -1 means every device (not for snpuFaultMemoryUce). */
#define SNPU_ACL_ERROR_RT_AICORE_EXCEPTION 507015
#define SNPU_ACL_ERROR_RT_DEVICE_MEM_ERROR 507053
#define SNPU_ACL_ERROR_RT_DEVICE_TASK_ABORT 107022
typedef enum snpuFaultKind {
  snpuFaultKernelError = 1,
  snpuFaultMemoryUce = 2,
  snpuFaultDeviceHang = 3,
  snpuFaultOutOfMemory = 4,
  snpuFaultSlow = 5
} snpuFaultKind;
typedef struct snpuFault {
  snpuFaultKind kind;
  int device;          /* visible index, or -1 */
  int64_t stream_id;   /* snpuStreamGetInfo's id, or -1: any stream */
  uint64_t at;         /* 1: the next matching kernel, task or allocation */
  int code;            /* snpuFaultKernelError: the error code (0: the default) */
  const char* message; /* snpuFaultKernelError: the message (NULL: Ascend's inner-error text); copied */
  void* ptr;           /* snpuFaultMemoryUce: the range */
  size_t size;         /* snpuFaultMemoryUce: the range; snpuFaultOutOfMemory: the smallest size that fails */
  uint64_t delay_us;   /* snpuFaultSlow */
} snpuFault;
/* SYNC. Arms a fault. snpuErrorInvalidValue for an unknown kind or a UCE range that is not device memory of device. */
SNPU_API snpuError_t snpuFaultInject(const snpuFault* fault);
/* SYNC. Disarms every fault not yet fired and ends slow devices (UCE ranges, hangs and stops stay: see below). */
SNPU_API snpuError_t snpuFaultClear(void);
/* SYNC. As aclrtDeviceTaskAbort: aborts the device's work. Running and queued tasks and those launched until
 * snpuDeviceRestart fail with SNPU_ACL_ERROR_RT_DEVICE_TASK_ABORT ("FORCE STOP"), a hang ends. Memory is kept. */
SNPU_API snpuError_t snpuDeviceStop(int device);
/* SYNC. Makes a stopped (or running) device usable again: its UCE ranges are repaired, errors its streams kept
 * unreported are dropped, hangs end. */
SNPU_API snpuError_t snpuDeviceRestart(int device);
/* SYNC. As aclrtGetMemUceInfo: up to capacity UCE ranges of the device into addrs/sizes, *count of them. */
SNPU_API snpuError_t snpuDeviceGetUceInfo(int device, void** addrs, size_t* sizes, size_t capacity, size_t* count);
/* SYNC, also inside kernels; never fails, never initializes the runtime. Nonzero while some device has a UCE range:
 * one atomic load, so that device code asks snpuMemRangeHasUce about its operands only then. */
SNPU_API int snpuMemUceActive(void);
/* SYNC, also inside kernels; never fails. 1 if [ptr, ptr + size) overlaps a UCE range of any device, else 0. Device
 * code touching such memory fails with SNPU_ACL_ERROR_RT_DEVICE_MEM_ERROR, its message starting "UCE ERROR", as the
 * chip's kernels do when they read a poisoned HBM page. */
SNPU_API int snpuMemRangeHasUce(const void* ptr, size_t size);

/* ---------------------------------------------------------------- init */

/* SYNC. Reads the configuration and creates the devices. Idempotent; every other call does it implicitly. */
SNPU_API snpuError_t snpuInit(void);

/* SYNC. 1 in a child forked after the runtime was initialized (every other call then fails with snpuErrorForked),
 * else 0. Never fails and never initializes the runtime: a cheap check for callers with state of their own. */
SNPU_API int snpuIsForkedChild(void);

/* SYNC. 1 once the runtime is initialized in this process (until snpuShutdown), else 0. Never fails and never
 * initializes the runtime. */
SNPU_API int snpuIsInitialized(void);

/* SYNC. Waits for all work, stops every compute thread, frees all device and pinned memory, removes the published
 * statistics. Every handle becomes invalid; a later call initializes anew. */
SNPU_API snpuError_t snpuShutdown(void);

/* ---------------------------------------------------------------- devices */

/* Two counts of cores, not to be confused: compute_threads are the host threads that run the device's kernels
 * (SOFTNPU_CORES: how fast the software device is); ai_cores is the chip's AI core count from its SoC profile
 * (what npu-smi and torch's multi_processor_count report, what code written for the chip tiles its work by). */
typedef struct snpuDeviceProp {
  char name[64];           /* the SoC the device presents as, as torch_npu's get_device_name(): "Ascend910B3" */
  size_t total_memory;     /* capacity in bytes (SOFTNPU_MEMORY_MB; default the SoC's HBM, see snpuSocProfile) */
  int compute_threads;     /* host threads running its kernels (SOFTNPU_CORES) */
  int physical_index;      /* index before ASCEND_RT_VISIBLE_DEVICES renumbering */
  int soc_version;         /* torch_npu's SocVersion number of the SoC: 223 for Ascend910B3 */
  int ai_cores;            /* the SoC's AI (cube) cores */
  int vector_cores;        /* the SoC's vector cores */
  char chip_name[32];      /* the chip's Name in npu-smi: "910B3" */
} snpuDeviceProp;

/* An Ascend chip's identity and published figures: a row of csrc/common/soc_profiles.def, which says what each field
 * means, where each figure comes from and which are estimates. Every device presents as the chip SOFTNPU_SOC_VERSION
 * selects. Strings are static (valid for the life of the process). */
typedef struct snpuSocProfile {
  const char* name;          /* "Ascend910B3" (get_device_name) */
  int soc_version;           /* 223 (torch_npu.npu.get_soc_version) */
  const char* npu_smi_name;  /* "910B3" */
  int ai_cores;
  int vector_cores;
  uint64_t hbm_bytes;        /* the chip's device memory */
  int clock_mhz;
  double cube_fp16_tflops;   /* float16 and bfloat16 */
  double cube_fp32_tflops;   /* float32 as HF32; 0 where the cube has none */
  double cube_int8_tops;
  double vector_fp16_tflops;
  double hbm_gbps;           /* device memory bandwidth, GB/s */
  uint64_t l2_bytes;
  double hccs_gbps;          /* chip-to-chip links of one device together, GB/s; 0 without HCCS */
  double roce_gbps;          /* scale-out network of one device, GB/s */
  int supports_bf16;         /* 0: torch_npu refuses bfloat16 on the chip */
  const char* source;        /* the figures' sources and estimates */
  double host_link_gbps;     /* host <-> device link (PCIe, or A3's Unified Bus), GB/s per direction */
} snpuSocProfile;

/* SYNC. The profile of the chip named name, or of the selected chip (SOFTNPU_SOC_VERSION) when name is NULL. Does not
 * initialize the runtime. snpuErrorInvalidValue naming the choices for an unknown name; snpuErrorInvalidConfig for
 * an unknown SOFTNPU_SOC_VERSION. */
SNPU_API snpuError_t snpuGetSocProfile(const char* name, snpuSocProfile* profile);
/* SYNC. The table's rows, in its order: *count of them, index 0 to *count - 1. Do not initialize the runtime. */
SNPU_API snpuError_t snpuGetSocProfileCount(int* count);
SNPU_API snpuError_t snpuGetSocProfileByIndex(int index, snpuSocProfile* profile);

/* SYNC. Number of visible devices. Does not initialize the runtime: before initialization it reads the configuration,
 * so that checking for devices (as torch.npu.is_available() does) leaves a child forked later free to use them. The
 * count is fixed from initialization on; before it, a changed environment changes the answer. */
SNPU_API snpuError_t snpuGetDeviceCount(int* count);
/* SYNC. Sets / gets the calling thread's current device. */
SNPU_API snpuError_t snpuSetDevice(int device);
SNPU_API snpuError_t snpuGetDevice(int* device);
/* SYNC. */
SNPU_API snpuError_t snpuGetDeviceProperties(snpuDeviceProp* prop, int device);
/* SYNC. Free and total device memory of a device, in bytes, as this process sees it. */
SNPU_API snpuError_t snpuMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes);
/* SYNC. Waits for all work on every stream of the current device; reports the first unreported kernel error of
 * any of them. */
SNPU_API snpuError_t snpuDeviceSynchronize(void);
/* SYNC. As snpuDeviceSynchronize, waiting at most timeout_us: snpuErrorNotReady if the work is not complete by then
 * (nothing reported; the work stays queued). A caller that must stay responsive (to Ctrl-C) waits in a loop of these.
 * Each call waits for the work queued before it. */
SNPU_API snpuError_t snpuDeviceSynchronizeTimeout(uint64_t timeout_us);

/* ---------------------------------------------------------------- memory */

/* SYNC. Allocates device memory on the current device, accounted against its capacity. Exhaustion returns
 * snpuErrorMemoryAllocation (never aborts). Size 0 gives *ptr == NULL. Alignment: 256 bytes at least. */
SNPU_API snpuError_t snpuMalloc(void** ptr, size_t size);
/* SYNC. Frees device memory. Waits first for all work on the owning device (as cudaFree does), so queued kernels
 * never see freed memory. NULL is a no-op. */
SNPU_API snpuError_t snpuFree(void* ptr);
/* SYNC. Allocates / frees pinned (page-locked) host memory: host memory the runtime knows, so asynchronous copies
 * from or to it do not wait. snpuFreeHost does not wait for copies: callers keep blocks alive until copies that use
 * them complete (the host caching allocator does). */
SNPU_API snpuError_t snpuMallocHost(void** ptr, size_t size);
SNPU_API snpuError_t snpuFreeHost(void* ptr);

/* Mapped host memory, as CUDA's cudaHostAlloc(cudaHostAllocMapped) / cudaHostGetDevicePointer (Ascend's
 * aclrtMallocHost + aclrtHostRegister(ACL_HOST_REGISTER_MAPPED), behind torch_npu's swapped memory): pinned host
 * memory that the current device also addresses directly, so kernels, copies and memsets take its device pointer as
 * device memory of that device, with no capacity accounted (it is the host's). The device pointer is the host
 * pointer (one address space, as CUDA's UVA). snpuPointerGetAttributes reports it as snpuMemoryTypeHost with the
 * device it is mapped for. snpuFreeHost of it waits first for all work on that device (as snpuFree), since queued
 * device code may still use it. */
#define snpuHostAllocDefault 0
#define snpuHostAllocMapped 2
/* SYNC. flags: snpuHostAllocDefault (as snpuMallocHost) or snpuHostAllocMapped; snpuErrorInvalidValue otherwise. */
SNPU_API snpuError_t snpuHostAlloc(void** ptr, size_t size, unsigned int flags);
/* SYNC. The device pointer of mapped host memory (interior pointers included); flags is 0. snpuErrorInvalidValue
 * for memory that is not mapped host memory. */
SNPU_API snpuError_t snpuHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned int flags);

/* Registering the program's own host memory, as CUDA's cudaHostRegister / cudaHostUnregister (ACL's
 * aclrtHostRegisterV2 / aclrtHostUnregister, behind torch_npu's npurt().npuHostRegister): [ptr, ptr + size) becomes
 * pinned host memory (snpuMemoryTypeHost, asynchronous copies, as snpuMallocHost's) without being allocated or freed
 * by the runtime; with snpuHostRegisterMapped also mapped host memory of the current device (see snpuHostAlloc),
 * which needs ptr and size multiples of the page size, as the device addresses whole pages.
 * SYNC. snpuErrorInvalidValue for a null ptr, size 0, unknown flags, a misaligned mapped range, or a range overlapping
 * memory the runtime knows (allocated or registered already). */
#define snpuHostRegisterDefault 0
#define snpuHostRegisterMapped 2
SNPU_API snpuError_t snpuHostRegister(void* ptr, size_t size, unsigned int flags);
/* SYNC. Ends the registration starting at ptr (snpuErrorInvalidValue if none does). As snpuFreeHost, it does not wait
 * for copies from or to the range; for mapped memory it first waits for all work on its device. */
SNPU_API snpuError_t snpuHostUnregister(void* ptr);

/* Virtual memory, as CUDA's cuMemAddressReserve / cuMemMap / cuMemUnmap: an address range of a device is reserved
 * with no memory behind it, then memory is mapped into it and unmapped from it in pages of the granularity, so an
 * allocation grows and shrinks in place. Mapped pages are accounted against the device's capacity (and in
 * snpuDeviceStats.memory_in_use) as snpuMalloc'd memory is; a reservation costs no capacity. Every pointer of a
 * reservation is device memory of its device (snpuPointerGetAttributes gives the reservation as base and size);
 * device code touching an unmapped page of it faults, as on hardware. */

/* SYNC. The granularity of snpuMemMap / snpuMemUnmap: their offsets and sizes are multiples of it. */
SNPU_API snpuError_t snpuMemGetGranularity(size_t* granularity);
/* SYNC. Reserves size bytes (a positive multiple of the granularity) of addresses on the current device, none
 * mapped. snpuErrorMemoryAllocation if the host has no such address range. */
SNPU_API snpuError_t snpuMemAddressReserve(void** ptr, size_t size);
/* SYNC. Maps fresh zeroed memory at [ptr, ptr + size) of a reservation, accounted against its device's capacity:
 * snpuErrorMemoryAllocation (nothing mapped) beyond it; snpuErrorInvalidValue if the range is not aligned to the
 * granularity, leaves the reservation or holds a page already mapped. */
SNPU_API snpuError_t snpuMemMap(void* ptr, size_t size);
/* SYNC. Unmaps [ptr, ptr + size) of a reservation, returning its memory to the device's capacity. Waits first for
 * all work on the owning device (as snpuFree), so queued kernels never see the pages go. snpuErrorInvalidValue if
 * the range is not aligned or holds a page that is not mapped. */
SNPU_API snpuError_t snpuMemUnmap(void* ptr, size_t size);
/* SYNC. Releases the reservation starting at ptr, unmapping what is still mapped (waiting for the device's work
 * first, as snpuFree). */
SNPU_API snpuError_t snpuMemAddressFree(void* ptr);

typedef enum snpuMemoryType {
  snpuMemoryTypeUnregistered = 0, /* ordinary (pageable) host memory */
  snpuMemoryTypeHost = 1,         /* pinned host memory from snpuMallocHost */
  snpuMemoryTypeDevice = 2        /* device memory from snpuMalloc */
} snpuMemoryType;

typedef struct snpuPointerAttributes {
  snpuMemoryType type;
  int device;       /* owning device for device memory, the device of mapped host memory, -1 otherwise */
  void* base;       /* start of the allocation containing the pointer (NULL if unregistered) */
  size_t size;      /* size of that allocation */
} snpuPointerAttributes;

/* SYNC. Attributes of any pointer, including interior pointers of an allocation. */
SNPU_API snpuError_t snpuPointerGetAttributes(snpuPointerAttributes* attr, const void* ptr);

/* Interprocess memory, as CUDA's cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle. Exported device
 * memory lives in shared memory (a memfd per allocation), so another process of the same user can map it:
 * the handle names the whole allocation holding a pointer (callers send the pointer's offset in it alongside), and
 * the opener sees the same bytes at its own address. A handle stays valid while the exporter holds the allocation;
 * a mapping outlives the exporter's free of it (the memory goes when the last process unmaps it), but what the
 * exporter does with the allocation meanwhile (reusing it) is the exporter's affair, as with CUDA. A reservation of
 * snpuMemAddressReserve is exported whole (into a memfd too): the importer sees the pages mapped into it,
 * now and later, at the same offsets; snpuMemUnmap takes them from the importer as well. */
#define SNPU_IPC_HANDLE_SIZE 64
typedef struct snpuIpcMemHandle {
  char reserved[SNPU_IPC_HANDLE_SIZE];
} snpuIpcMemHandle_t;
/* SYNC. A handle for the snpuMalloc allocation or the reservation containing ptr (interior pointers included).
 * snpuErrorInvalidPointer for a pointer that is not device memory, or that was itself opened from another process;
 * snpuErrorNotPermitted inside a kernel. The first export of an allocation or a reservation moves it into shared
 * memory in place (same address, same bytes; private memory is cheaper to create, and few allocations are shared): it
 * waits for the device code running at that moment on every device and holds new device code back while it copies. */
SNPU_API snpuError_t snpuIpcGetMemHandle(snpuIpcMemHandle_t* handle, void* ptr);
/* SYNC. Maps another process's allocation: *ptr is its start here, device memory of the device with the exporter's
 * index (not accounted against its capacity: the exporter's). snpuErrorInvalidValue for a malformed handle or one
 * exported by this very process (CUDA's rule too), snpuErrorInvalidHandle if the allocation no longer exists
 * (freed, or its process ended), snpuErrorInvalidDevice if this process has no device of that index. Each open maps
 * anew; flags is 0 (snpuIpcMemLazyEnablePeerAccess, CUDA's only flag, is accepted and means nothing here). */
#define snpuIpcMemLazyEnablePeerAccess 1
SNPU_API snpuError_t snpuIpcOpenMemHandle(void** ptr, snpuIpcMemHandle_t handle, unsigned int flags);
/* SYNC. Unmaps memory opened by snpuIpcOpenMemHandle, after all work on its device (as snpuFree). */
SNPU_API snpuError_t snpuIpcCloseMemHandle(void* ptr);

typedef enum snpuMemcpyKind {
  snpuMemcpyHostToHost = 0,
  snpuMemcpyHostToDevice = 1,
  snpuMemcpyDeviceToHost = 2,
  snpuMemcpyDeviceToDevice = 3,
  snpuMemcpyDefault = 4 /* inferred from the pointers */
} snpuMemcpyKind;

/* SYNC. Copies on the default stream of the device owning the device pointer (the current device for host to
 * host), after the work already queued there, and waits for it. */
SNPU_API snpuError_t snpuMemcpy(void* dst, const void* src, size_t size, snpuMemcpyKind kind);
/* ASYNC when the host side is pinned memory (or absent: device to device). With pageable host memory, as CUDA does:
 * host to device returns once the source is staged in a runtime buffer (the caller may reuse its buffer at once; the
 * copy runs in stream order), device to host completes before the call returns. */
SNPU_API snpuError_t snpuMemcpyAsync(void* dst, const void* src, size_t size, snpuMemcpyKind kind,
                                     struct snpuStream* stream);
/* ASYNC. Sets size bytes of device memory to value. */
SNPU_API snpuError_t snpuMemsetAsync(void* dst, int value, size_t size, struct snpuStream* stream);

/* ---------------------------------------------------------------- streams */

typedef struct snpuStream* snpuStream_t;

/* SYNC. Priority range: lower numbers are higher priorities, as in CUDA (*least == 0, *greatest < 0). */
SNPU_API snpuError_t snpuDeviceGetStreamPriorityRange(int* least, int* greatest);
/* SYNC. Creates a stream on the current device. Priorities outside the range are clamped to it. */
SNPU_API snpuError_t snpuStreamCreate(snpuStream_t* stream, int priority);
/* SYNC. Waits for the stream's work, then destroys it. A kernel error never reported is dropped. The default
 * stream cannot be destroyed (snpuErrorInvalidHandle). */
SNPU_API snpuError_t snpuStreamDestroy(snpuStream_t stream);
/* SYNC. The default stream of a device. */
SNPU_API snpuError_t snpuGetDefaultStream(int device, snpuStream_t* stream);
/* SYNC. snpuSuccess when all work queued so far has completed, snpuErrorNotReady otherwise. Reports no error. */
SNPU_API snpuError_t snpuStreamQuery(snpuStream_t stream);
/* SYNC. Waits for all work queued so far; reports the stream's unreported kernel error. Not allowed from a
 * kernel. */
SNPU_API snpuError_t snpuStreamSynchronize(snpuStream_t stream);
/* SYNC. As snpuStreamSynchronize, waiting at most timeout_us: snpuErrorNotReady if the work is not complete by then. */
SNPU_API snpuError_t snpuStreamSynchronizeTimeout(snpuStream_t stream, uint64_t timeout_us);
/* ASYNC. Work queued on the stream after this call starts only once the event's recorded work has completed.
 * The event may belong to any stream of any device; an event never recorded is complete. */
SNPU_API snpuError_t snpuStreamWaitEvent(snpuStream_t stream, struct snpuEvent* event);
/* SYNC. Device, priority, and a process-unique id (the default stream of each device has id 0). Any out-parameter
 * may be NULL. */
SNPU_API snpuError_t snpuStreamGetInfo(snpuStream_t stream, int* device, int* priority, uint64_t* id);

/* ---------------------------------------------------------------- events */

typedef struct snpuEvent* snpuEvent_t;

enum { snpuEventDefault = 0, snpuEventDisableTiming = 1 };

/* SYNC. Creates an event with snpuEventDefault (timed) or snpuEventDisableTiming flags. */
SNPU_API snpuError_t snpuEventCreate(snpuEvent_t* event, unsigned flags);
/* SYNC. Destroys the event; work already waiting on it is not affected. */
SNPU_API snpuError_t snpuEventDestroy(snpuEvent_t event);
/* ASYNC. Captures the work queued on the stream so far; the event completes (and takes its timestamp) when the
 * stream reaches this point. Recording again replaces the previous capture. */
SNPU_API snpuError_t snpuEventRecord(snpuEvent_t event, snpuStream_t stream);
/* SYNC. snpuSuccess when the captured work has completed (or the event was never recorded), else
 * snpuErrorNotReady. */
SNPU_API snpuError_t snpuEventQuery(snpuEvent_t event);
/* SYNC. Waits for the captured work; reports the recording stream's unreported kernel error, if it failed before
 * this point. Not allowed from a kernel. */
SNPU_API snpuError_t snpuEventSynchronize(snpuEvent_t event);
/* SYNC. As snpuEventSynchronize, waiting at most timeout_us: snpuErrorNotReady if the work is not complete by then. */
SNPU_API snpuError_t snpuEventSynchronizeTimeout(snpuEvent_t event, uint64_t timeout_us);
/* SYNC. Milliseconds between two completed timed events. snpuErrorNotReady if either has not completed,
 * snpuErrorInvalidHandle if either was created with snpuEventDisableTiming or never recorded. */
SNPU_API snpuError_t snpuEventElapsedTime(float* ms, snpuEvent_t start, snpuEvent_t end);
/* SYNC. When the event's captured work completed, in microseconds of the host's monotonic clock (time since boot, as
 * ACL's aclrtEventGetTimestamp counts from the device's start). Errors as snpuEventElapsedTime's. */
SNPU_API snpuError_t snpuEventGetTimestamp(snpuEvent_t event, uint64_t* us);

/* ---------------------------------------------------------------- kernels */

/* A kernel: a host function run by one of the device's compute threads, in stream order. It returns 0 on success;
 * any other value is a failure code that the runtime keeps with the kernel's name and the message the kernel set
 * with snpuKernelSetErrorMessage. */
typedef int (*snpuKernelFn)(void* arg);
/* Called exactly once per launch, after the kernel ran (or when it is dropped by snpuShutdown, or at once when
 * snpuLaunchKernel rejects its arguments): frees arg. May be NULL. */
typedef void (*snpuKernelCleanupFn)(void* arg);

/* ASYNC. Enqueues fn(arg) on the stream. name must stay valid until the kernel has run (a string literal, or a
 * name owned by a registry that outlives the runtime); it appears in errors, logs and the profiler. Launching
 * allocates nothing and makes no system call while the stream already has queued work, unless 1024 tasks are
 * already queued: then, as with CUDA's bounded launch queue, it waits for the stream to drain below that. */
SNPU_API snpuError_t snpuLaunchKernel(snpuStream_t stream, const char* name, snpuKernelFn fn, void* arg,
                                      snpuKernelCleanupFn cleanup);
/* As snpuLaunchKernel, waiting at most timeout_us for room in a full queue: snpuErrorNotReady if there is still none,
 * and then nothing was enqueued and cleanup was not called (the caller keeps arg, to launch again or free). */
SNPU_API snpuError_t snpuLaunchKernelTimeout(snpuStream_t stream, const char* name, snpuKernelFn fn, void* arg,
                                             snpuKernelCleanupFn cleanup, uint64_t timeout_us);

/* Inside a kernel only: the message kept with the failure the kernel is about to return. Copied. */
SNPU_API void snpuKernelSetErrorMessage(const char* message);
/* Inside a kernel only: how many threads the kernel may use for its own parallelism, given work_bytes, the bytes it
 * reads and writes. One for a small kernel (below 4 MiB: a second thread, sharing a core with the launching host
 * thread or another stream, costs it more than it gains); else the device's compute threads divided among the
 * kernels running or queued at this moment on all devices, never more than the host's cores. A small kernel that ran
 * 250 us or more on its one thread at its last two launches (compute-bound: a GEMM, a fused layer) is treated as a
 * large one (learned per kernel name and work_bytes). Call it once per kernel, at its start. 1 outside a kernel. */
SNPU_API int snpuKernelThreadBudget(uint64_t work_bytes);
/* Inside a kernel only: the stream it runs on. NULL outside kernels. */
SNPU_API snpuStream_t snpuKernelCurrentStream(void);

/* ---------------------------------------------------------------- graphs (stream capture)
 *
 * As CUDA's stream capture. Between snpuStreamBeginCapture and snpuStreamEndCapture, kernels, copies and memsets
 * launched on the stream are recorded, not run (their launch calls return snpuSuccess at once). End-capture yields a
 * graph; snpuGraphLaunch enqueues the whole recorded sequence as ONE task, run by one compute thread in recorded
 * order, ordered with the stream's other work; a graph may be launched any number of times. A recorded kernel's arg
 * belongs to the graph: its cleanup runs once, when the graph is destroyed and no launch of it is pending.
 *
 * Illegal while capturing (snpuErrorStreamCaptureUnsupported; the capture is invalidated: later launches on the
 * stream fail with snpuErrorStreamCaptureInvalidated, and end-capture fails with it and yields no graph):
 *  - snpuStreamSynchronize / snpuStreamQuery of the capturing stream, a copy that must complete before its call
 *    returns (pageable host memory) or is staged (pageable host to device), a wait of it on an event not recorded
 *    in the same capture;
 *  - unless the capture's mode is snpuStreamCaptureModeRelaxed: snpuDeviceSynchronize, snpuMemcpy and snpuFree on
 *    the capturing stream's device — from any thread in global mode, from the thread that began the capture in
 *    thread-local mode (CUDA's cudaStreamCaptureMode). The capture invalidated is every capture on that device
 *    that the mode applies to.
 *
 * Fork/join, as CUDA's: snpuEventRecord on a capturing stream records no marker, the event names the capture; a
 * stream (not a default stream, on the same device) that waits on such an event joins the capture, and its launches
 * are recorded into the same graph until the capture ends (on the stream that began it). The graph runs its work in
 * launch order, which keeps every dependency the host's records and waits expressed. */

typedef struct snpuGraph* snpuGraph_t;

typedef enum snpuStreamCaptureMode {
  snpuStreamCaptureModeGlobal = 0,
  snpuStreamCaptureModeThreadLocal = 1,
  snpuStreamCaptureModeRelaxed = 2
} snpuStreamCaptureMode;

typedef enum snpuStreamCaptureStatus {
  snpuStreamCaptureStatusNone = 0,
  snpuStreamCaptureStatusActive = 1,
  snpuStreamCaptureStatusInvalidated = 2
} snpuStreamCaptureStatus;

/* SYNC. Starts capturing the stream (not the default stream: snpuErrorInvalidValue, nor one already capturing). */
SNPU_API snpuError_t snpuStreamBeginCapture(snpuStream_t stream, snpuStreamCaptureMode mode);
/* SYNC. Ends the capture and gives the graph of what was recorded (to destroy with snpuGraphDestroy), or fails with
 * snpuErrorStreamCaptureInvalidated (*graph = NULL). Either way the stream no longer captures. */
SNPU_API snpuError_t snpuStreamEndCapture(snpuStream_t stream, snpuGraph_t* graph);
/* SYNC. The stream's snpuStreamCaptureStatus. */
SNPU_API snpuError_t snpuStreamIsCapturing(snpuStream_t stream, snpuStreamCaptureStatus* status);
/* SYNC. As snpuStreamIsCapturing (status may be NULL), and the capture's id (0 when the stream does not capture):
 * unique in the process, the same for every stream that joined the capture (cudaStreamGetCaptureInfo's id). */
SNPU_API snpuError_t snpuStreamGetCaptureInfo(snpuStream_t stream, snpuStreamCaptureStatus* status, uint64_t* id);
/* SYNC. A conditional (IF) node, as CUDA's: the work the capture records from now until
 * snpuStreamEndCaptureToConditionalNode runs, at each launch of the graph, only if the byte at pred (device memory,
 * e.g. a bool tensor written by earlier work of the graph) is non-zero when the launch reaches it. Nodes nest; only
 * the stream that began the capture makes them, and end-capture fails (snpuErrorInvalidValue) while one is open. */
SNPU_API snpuError_t snpuStreamBeginCaptureToIfNode(snpuStream_t stream, const void* pred);
/* SYNC. Closes the innermost open conditional node of the stream's capture. */
SNPU_API snpuError_t snpuStreamEndCaptureToConditionalNode(snpuStream_t stream);
/* SYNC. Number of recorded kernels, copies and memsets. */
SNPU_API snpuError_t snpuGraphGetNodeCount(snpuGraph_t graph, size_t* count);
/* SYNC. The name of the recorded node at index (in launch order): the kernel's, or "Memcpy HtoD" and the like; valid
 * while the graph exists (its graph dumps). */
SNPU_API snpuError_t snpuGraphGetNodeName(snpuGraph_t graph, size_t index, const char** name);
/* ASYNC. Enqueues the graph's recorded work on the stream as one task (named "NPUGraph"). A node that fails ends the
 * task; the failure is reported as a kernel error of the stream, under the node's message. */
SNPU_API snpuError_t snpuGraphLaunch(snpuGraph_t graph, snpuStream_t stream);
/* SYNC. Releases the graph without waiting: pending launches keep it until they ran; the recorded kernels' cleanups
 * run after the last. */
SNPU_API snpuError_t snpuGraphDestroy(snpuGraph_t graph);

/* ---------------------------------------------------------------- activity (profiler) */

typedef struct snpuActivityRecord {
  const char* name;    /* kernel name, or "Memcpy HtoD" / "Memcpy DtoH" / "Memcpy DtoD" / "Memset" */
  int device;
  uint64_t stream_id;
  uint64_t correlation_id; /* value of snpuActivitySetCorrelationId on the launching thread at launch */
  int64_t start_ns;        /* CLOCK_REALTIME-based nanoseconds, as the profiler's clock */
  int64_t end_ns;
  int failed;
  /* Copies and memsets (0 and -1 for kernels), as msptiActivityMemcpy's bytes and copyKind: what a profiler needs to
   * estimate them. */
  uint64_t bytes;    /* bytes copied or set */
  int copy_kind;     /* copies: the snpuMemcpyKind they ran as (snpuMemcpyDefault resolved); -1 otherwise */
  int pageable;      /* copies with a host side: 1 when the caller's host memory is not pinned (staged, or waited
                        for), 0 when pinned or device to device */
} snpuActivityRecord;

/* SYNC. Starts / stops recording the execution of every kernel, copy and memset launched from now on (as CUPTI's
 * records: work launched before the start gets none, even if it runs after it). */
SNPU_API snpuError_t snpuActivityEnable(int enable);
/* SYNC. Tags the launches of the calling thread, until the next call, with an id the profiler correlates with its
 * host-side op records. */
SNPU_API snpuError_t snpuActivitySetCorrelationId(uint64_t id);
/* SYNC. Moves up to capacity completed records into out (oldest first); *count receives how many. */
SNPU_API snpuError_t snpuActivityDrain(snpuActivityRecord* out, size_t capacity, size_t* count);

/* ---------------------------------------------------------------- statistics */

typedef struct snpuDeviceStats {
  uint64_t memory_in_use;     /* bytes of device memory this process holds (snpuMalloc'd or snpuMemMap'ped) */
  uint64_t memory_peak;       /* peak of memory_in_use */
  uint64_t kernels_launched;  /* kernels and copies enqueued */
  uint64_t kernels_completed;
  uint64_t busy_ns;           /* total time the device's compute threads spent running work */
  uint64_t sync_waits;        /* synchronizing calls that had to wait */
} snpuDeviceStats;

/* SYNC. This process's statistics for a device; the same figures are published for npu-smi. */
SNPU_API snpuError_t snpuGetDeviceStats(int device, snpuDeviceStats* stats);

#ifdef __cplusplus
}
#endif

#endif /* SOFTNPU_RUNTIME_H */
