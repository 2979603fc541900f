// The caching allocator's private-pool hooks graph trees run on, named as torch_npu._C names them (CUDA's are
// torch._C._cuda_beginAllocateCurrentThreadToPool, ...). Storages travel as their StorageImpl addresses, as in
// torch's bindings (StorageWeakRef's cdata).
#include "backend/python/graph_tree.h"

#include <set>
#include <vector>

#include <ATen/Tensor.h>
#include <c10/core/StorageImpl.h>

#include "backend/allocator.h"

namespace py = pybind11;

namespace softnpu {
namespace {

c10::MempoolId_t pool_of(const py::tuple& t) {
  TORCH_CHECK(t.size() == 2, "expected a memory pool id (a tuple of two ints), got ", py::str(t).cast<std::string>());
  return {t[0].cast<c10::CaptureId_t>(), t[1].cast<c10::CaptureId_t>()};
}

std::vector<c10::StorageImpl*> storages_of(const std::vector<uintptr_t>& cdata) {
  std::vector<c10::StorageImpl*> out;
  out.reserve(cdata.size());
  for (uintptr_t p : cdata) out.push_back(reinterpret_cast<c10::StorageImpl*>(p));
  return out;
}

}  // namespace

void register_graph_tree_bindings(py::module_& m) {
  auto* alloc = NPUCachingAllocator::get();
  // The calling thread's allocations on the device come from the pool (created on first use) until endAllocateToPool;
  // the pool holds one more reference until releasePool. Graph trees checkpoint the pools they allocate to this way:
  // their segments stay whole.
  m.def("_npu_beginAllocateCurrentThreadToPool", [alloc](int device, const py::tuple& pool) {
    alloc->keep_whole_segments(pool_of(pool));
    alloc->retain_pool(pool_of(pool));
    alloc->begin_allocate_to_pool(static_cast<c10::DeviceIndex>(device), pool_of(pool));
  });
  m.def("_npu_endAllocateToPool", [alloc](int device, const py::tuple& pool) {
    alloc->end_allocate_to_pool(static_cast<c10::DeviceIndex>(device), pool_of(pool));
  });
  m.def("_npu_releasePool", [alloc](int /*device*/, const py::tuple& pool) { alloc->release_pool(pool_of(pool)); });

  py::class_<NPUCachingAllocator::PoolCheckpoint, std::shared_ptr<NPUCachingAllocator::PoolCheckpoint>>(
      m, "_npu_NPUAllocator_AllocatorState")
      .def_property_readonly("device", [](const NPUCachingAllocator::PoolCheckpoint& c) { return c.device; })
      .def_property_readonly("pool", [](const NPUCachingAllocator::PoolCheckpoint& c) {
        return py::make_tuple(c.pool.first, c.pool.second);
      })
      .def_property_readonly("num_segments",
                             [](const NPUCachingAllocator::PoolCheckpoint& c) { return c.segments.size(); });
  m.def("_npu_getCheckpointState", [alloc](int device, const py::tuple& pool) {
    return alloc->checkpoint_pool(static_cast<c10::DeviceIndex>(device), pool_of(pool));
  });
  m.def("_npu_setCheckpointPoolState",
        [alloc](int device, const std::shared_ptr<NPUCachingAllocator::PoolCheckpoint>& state,
                const std::vector<uintptr_t>& stale_storages, const std::vector<uintptr_t>& storages_to_add_deleters_to) {
          TORCH_CHECK(state && state->device == device, "_npu_setCheckpointPoolState: the state is not of device ",
                      device);
          alloc->restore_pool_checkpoint(*state, storages_of(stale_storages), storages_of(storages_to_add_deleters_to));
        });
  m.def("_npu_checkPoolLiveAllocations", [alloc](int device, const py::tuple& pool, const std::set<uintptr_t>& ptrs) {
    std::set<void*> expected;
    for (uintptr_t p : ptrs) expected.insert(reinterpret_cast<void*>(p));
    return alloc->pool_live_allocations_are(static_cast<c10::DeviceIndex>(device), pool_of(pool), expected);
  });
  // torch's CUDA builds define these three in torch._C (torch/csrc/cuda/Module.cpp), though nothing in them is CUDA's;
  // the installed torch has none, so graph trees get them here.
  // Whether tensors[i] still starts at data_ptrs[i] for every index (graph trees' check of static input addresses).
  // (The inputs hold ints and opaque objects too, at other indices.)
  m.def("_tensors_data_ptrs_at_indices_equal", [](const py::list& tensors, const py::list& data_ptrs,
                                                   const std::vector<int64_t>& indices) {
    for (int64_t i : indices) {
      const py::handle ptr = data_ptrs[i];
      if (ptr.is_none() ||
          reinterpret_cast<uintptr_t>(tensors[i].cast<at::Tensor>().data_ptr()) != ptr.cast<uintptr_t>())
        return false;
    }
    return true;
  });
  // An output whose memory a later replay overwrites: reading its data raises `msg` instead.
  m.def("_set_storage_access_error_msg", [](const at::Tensor& t, const std::string& msg) {
    t.unsafeGetTensorImpl()->release_storage_and_set_meta_custom_data_ptr_error_msg_(msg);
  });
  m.def("_set_storage_data_ptr_access_error_msg", [](uintptr_t storage, const std::string& msg) {
    reinterpret_cast<c10::StorageImpl*>(storage)->release_data_and_set_meta_custom_data_ptr_error_msg_(msg);
  });
  m.def("_npu_isHistoryEnabled", [alloc] { return alloc->history_enabled(); });
  m.def("_has_Standard_Deleter", [](uintptr_t storage) {
    return NPUCachingAllocator::owns_block(reinterpret_cast<c10::StorageImpl*>(storage));
  });
  m.def("_free_And_Remove_DeleterFn", [alloc](uintptr_t storage) {
    alloc->free_and_remove_deleter(reinterpret_cast<c10::StorageImpl*>(storage));
  });
}

}  // namespace softnpu
