// npu_change_data_ptr(dst, src, index), torch_npu's op behind combined tensors (npu_combine_tensors): dst's storage
// now begins at element `index` of src's storage. As on torch_npu the storage itself is re-pointed (its DataPtr
// swapped for one that does not own the memory), keeping its size: every tensor over that storage follows, and the
// tensor's sizes are not checked against it (torch_npu's combined-tensor users shrink a storage first, then copy
// the whole tensor into the combined buffer). Kernels already queued keep the pointer they were launched with (a
// launch records its tensors' data pointers); dst's old memory goes back to the caching allocator, stream-ordered.
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "backend/error_code.h"

TORCH_LIBRARY_FRAGMENT(npu, m) { m.def("npu_change_data_ptr(Tensor dst, Tensor src, int index) -> int"); }

namespace softnpu {

namespace {

int64_t storage_elements(const at::Tensor& t) { return static_cast<int64_t>(t.storage().nbytes() / t.itemsize()); }

int64_t npu_change_data_ptr(const at::Tensor& dst, const at::Tensor& src, int64_t index) {
  TORCH_CHECK(index >= 0, "npu_change_data_ptr: expected an offset (index) of zero or more, got ", index,
              error_code(SubModule::OPS, ErrCode::VALUE));
  TORCH_CHECK(dst.is_privateuseone() && src.is_privateuseone(), "npu_change_data_ptr: dst and src must be npu "
              "tensors, got ", dst.device(), " and ", src.device(), error_code(SubModule::OPS, ErrCode::PARAM));
  TORCH_CHECK(dst.device() == src.device(), "npu_change_data_ptr: dst is on ", dst.device(), " and src on ",
              src.device(), error_code(SubModule::OPS, ErrCode::PARAM));
  TORCH_CHECK(dst.scalar_type() == src.scalar_type(), "npu_change_data_ptr: expected src and dst of the same dtype, "
              "got src of ", src.scalar_type(), " and dst of ", dst.scalar_type(),
              error_code(SubModule::OPS, ErrCode::TYPE));
  const int64_t need = storage_elements(dst), have = storage_elements(src);
  TORCH_CHECK(index + need <= have, "npu_change_data_ptr: offsets overflow: elements ", index, "..", index + need,
              " of src's storage of ", have, error_code(SubModule::OPS, ErrCode::PARAM));
  char* target = static_cast<char*>(src.storage().mutable_data()) + index * src.itemsize();
  dst.storage().unsafeGetStorageImpl()->set_data_ptr_noswap(c10::DataPtr(target, dst.device()));
  return 0;
}

}  // namespace

TORCH_LIBRARY_IMPL(npu, PrivateUse1, m) { m.impl("npu_change_data_ptr", npu_change_data_ptr); }

}  // namespace softnpu
