#include "backend/ops/fft_plan_cache.h"

#include <c10/util/Exception.h>

namespace softnpu {

bool is_fft_op(const std::string& schema_name) {
  return schema_name == "aten::_fft_c2c" || schema_name == "aten::_fft_r2c" || schema_name == "aten::_fft_c2r";
}

std::shared_ptr<MetaCache> fft_plan_cache() {
  static const auto cache = std::make_shared<MetaCache>();
  return cache;
}

int64_t fft_plan_cache_size() { return static_cast<int64_t>(fft_plan_cache()->size()); }

int64_t fft_plan_cache_max_size() { return static_cast<int64_t>(fft_plan_cache()->capacity()); }

void set_fft_plan_cache_max_size(int64_t max_size) {
  TORCH_CHECK_VALUE(max_size >= 0, "fft_plan_cache.max_size must be non-negative, got ", max_size);
  fft_plan_cache()->set_capacity(static_cast<size_t>(max_size));
}

void clear_fft_plan_cache() { fft_plan_cache()->clear(); }

}  // namespace softnpu
