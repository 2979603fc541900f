#include "backend/ops/meta_cache.h"

#include <c10/core/DefaultDtype.h>

#include <cstring>

namespace softnpu {

namespace {

enum Tag : int64_t {
  kNone = 1,
  kTensor,
  kUndefinedTensor,
  kInt,
  kDouble,
  kBool,
  kComplex,
  kString,
  kIntList,
  kDoubleList,
  kBoolList,
  kTensorList,
  kGenericList,
  kDevice,
  kGenerator,
};

int64_t double_bits(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

void add_tensor(const at::Tensor& t, MetaKey* k) {
  if (!t.defined()) {
    k->words.push_back(kUndefinedTensor);
    return;
  }
  const auto* impl = t.unsafeGetTensorImpl();
  k->words.push_back(kTensor);
  k->words.push_back(static_cast<int64_t>(t.device().type()));
  k->words.push_back(static_cast<int64_t>(t.scalar_type()));
  k->words.push_back((impl->is_wrapped_number() ? 1 : 0) | (t.is_conj() ? 2 : 0) | (t.is_neg() ? 4 : 0));
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  k->words.push_back(static_cast<int64_t>(sizes.size()));
  k->words.append(sizes.begin(), sizes.end());
  k->words.append(strides.begin(), strides.end());
}

bool add_value(const c10::IValue& v, MetaKey* k) {
  if (v.isNone()) {
    k->words.push_back(kNone);
  } else if (v.isTensor()) {
    add_tensor(v.toTensor(), k);
  } else if (v.isInt()) {
    k->words.push_back(kInt);
    k->words.push_back(v.toInt());
  } else if (v.isDouble()) {
    k->words.push_back(kDouble);
    k->words.push_back(double_bits(v.toDouble()));
  } else if (v.isBool()) {
    k->words.push_back(kBool);
    k->words.push_back(v.toBool());
  } else if (v.isComplexDouble()) {
    const auto c = v.toComplexDouble();
    k->words.push_back(kComplex);
    k->words.push_back(double_bits(c.real()));
    k->words.push_back(double_bits(c.imag()));
  } else if (v.isString()) {
    const auto& s = v.toStringRef();
    k->words.push_back(kString);
    k->words.push_back(static_cast<int64_t>(s.size()));
    for (size_t i = 0; i < s.size(); i += sizeof(int64_t)) {
      int64_t w = 0;
      std::memcpy(&w, s.data() + i, std::min(sizeof(int64_t), s.size() - i));
      k->words.push_back(w);
    }
  } else if (v.isDevice()) {
    k->words.push_back(kDevice);
    k->words.push_back(static_cast<int64_t>(v.toDevice().type()));
  } else if (v.isGenerator()) {
    k->words.push_back(kGenerator);
  } else if (v.isIntList()) {
    const auto list = v.toIntList();
    k->words.push_back(kIntList);
    k->words.push_back(static_cast<int64_t>(list.size()));
    for (int64_t x : list) k->words.push_back(x);
  } else if (v.isDoubleList()) {
    const auto list = v.toDoubleList();
    k->words.push_back(kDoubleList);
    k->words.push_back(static_cast<int64_t>(list.size()));
    for (double x : list) k->words.push_back(double_bits(x));
  } else if (v.isBoolList()) {
    const auto list = v.toBoolList();
    k->words.push_back(kBoolList);
    k->words.push_back(static_cast<int64_t>(list.size()));
    for (bool x : list) k->words.push_back(x);
  } else if (v.isTensorList()) {
    const auto list = v.toTensorList();
    k->words.push_back(kTensorList);
    k->words.push_back(static_cast<int64_t>(list.size()));
    for (const at::Tensor& t : list) add_tensor(t, k);
  } else if (v.isList()) {
    const auto list = v.toListRef();
    k->words.push_back(kGenericList);
    k->words.push_back(static_cast<int64_t>(list.size()));
    for (const auto& e : list)
      if (!add_value(e, k)) return false;
  } else {
    return false;
  }
  return true;
}

}  // namespace

bool build_meta_key(c10::ArrayRef<c10::IValue> args, MetaKey* key) {
  key->words.clear();
  // Factory ops without a dtype argument produce the default dtype.
  key->words.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  for (const auto& a : args)
    if (!add_value(a, key)) return false;
  uint64_t h = 0x9E3779B97F4A7C15ULL;
  for (int64_t w : key->words) {
    h ^= static_cast<uint64_t>(w) + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0xFF51AFD7ED558CCDULL;
  }
  key->hash = static_cast<size_t>(h ^ (h >> 33));
  return true;
}

std::shared_ptr<const MetaResult> MetaCache::find(const MetaKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second;
}

void MetaCache::insert(MetaKey key, std::shared_ptr<const MetaResult> result) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capacity_ == 0) return;
  if (map_.size() >= capacity_) map_.clear();
  map_.emplace(std::move(key), std::move(result));
}

size_t MetaCache::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return map_.size();
}

size_t MetaCache::capacity() {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_;
}

void MetaCache::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = capacity;
  if (map_.size() > capacity_) map_.clear();
}

void MetaCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  map_.clear();
}

}  // namespace softnpu
