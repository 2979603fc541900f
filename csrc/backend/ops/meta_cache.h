// Cache of what Meta kernels infer. Output sizes, strides and dtypes depend only on the op and its arguments'
// metadata (sizes, strides, dtypes, scalar values), never on tensor data, so one Meta run per combination suffices:
// later launches with the same metadata skip shape inference (the largest host cost of a launch).
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace softnpu {

// What a Meta run produced: its returns (meta tensors standing for the fresh outputs) and the final metadata of
// the op's out= arguments, which the op may have resized.
struct MetaResult {
  std::vector<c10::IValue> returns;
  std::vector<c10::IValue> out_args;  // parallel to OpInfo::out_args
  // Learned by a kernel: the op's out= overload does not honour outputs of these shapes (kernel.cpp). Shared with the
  // kernels apart from the rest: the meta tensors (which may have Python objects) must stay on the host.
  std::shared_ptr<std::atomic<bool>> out_variant_failed = std::make_shared<std::atomic<bool>>(false);
};

struct MetaKey {
  c10::SmallVector<int64_t, 48> words;
  size_t hash = 0;
  bool operator==(const MetaKey& o) const { return words == o.words; }
};

// Encodes the arguments' metadata. False when some argument cannot be keyed (symbolic values, objects): such
// launches run the Meta kernel every time.
bool build_meta_key(c10::ArrayRef<c10::IValue> args, MetaKey* key);

class MetaCache {
 public:
  // Bounds memory for ops called with ever-changing shapes; dropping entries only costs a Meta run.
  static constexpr size_t kDefaultCapacity = 512;

  std::shared_ptr<const MetaResult> find(const MetaKey& key);
  void insert(MetaKey key, std::shared_ptr<const MetaResult> result);

  // For caches users size (torch.npu.backends.fft_plan_cache): entries, the bound (0 keeps nothing), emptying.
  size_t size();
  size_t capacity();
  void set_capacity(size_t capacity);
  void clear();

 private:
  struct KeyHash {
    size_t operator()(const MetaKey& k) const { return k.hash; }
  };
  std::mutex mutex_;
  size_t capacity_ = kDefaultCapacity;
  std::unordered_map<MetaKey, std::shared_ptr<const MetaResult>, KeyHash> map_;
};

}  // namespace softnpu
