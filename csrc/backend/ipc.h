// npu storages shared between processes, with CUDA IPC's lifetime rules (torch/csrc/CudaIPCTypes and
// StorageSharing.cpp's _share_cuda_ / _new_shared_cuda / _release_ipc_counter):
//
//  - The sender exports the runtime allocation (a caching-allocator segment) holding the storage
//    (snpuIpcGetMemHandle) and the storage's offset in it. Its block must not go back to the cache while a receiver
//    uses it: the storage's DataPtr is wrapped (once) in a "sent" holder with a counter in shared memory, incremented
//    by every send; when the sender drops the storage, the block is freed only once the counter is 0, else it waits
//    in a list that ipc_collect (torch.npu.ipc_collect, and every new send) goes through.
//  - The receiver maps the allocation (once per process, however many storages use it) and holds one count per
//    send it received: its storage's deleter decrements the counter, release_ipc_counter decrements at once for a
//    send whose storage it already had. The mapping is closed with the last storage using it.
//  - Readiness: the sender waits for its current stream before exporting, so what was queued before the send is in
//    memory when the receiver reads it (CUDA records an event the receiver waits on instead: same guarantee).
#pragma once

#include <c10/core/Storage.h>

#include <cstdint>
#include <string>

namespace softnpu {

struct SharedStorage {
  int device;
  std::string handle;              // snpuIpcMemHandle_t's bytes
  size_t size_bytes;               // the storage's
  size_t offset_bytes;             // the storage's data in the exported allocation
  std::string ref_counter_handle;  // the shared counters' file
  uint64_t ref_counter_offset;     // the counter's index in it
};

SharedStorage share_storage(const c10::Storage& storage);
c10::Storage open_shared_storage(int device, const std::string& handle, size_t size_bytes, size_t offset_bytes,
                                 const std::string& ref_counter_handle, uint64_t ref_counter_offset);
void release_ipc_counter(const std::string& ref_counter_handle, uint64_t ref_counter_offset);
// Frees the sent blocks no receiver holds any more; true if some remain held.
bool ipc_collect();

}  // namespace softnpu
