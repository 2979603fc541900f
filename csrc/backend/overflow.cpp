#include "backend/overflow.h"

#include <ATen/ops/isfinite.h>

#include <atomic>

#include "backend/ops/ivalue_tensors.h"

namespace softnpu {

namespace {
std::atomic<bool> g_armed{false};
std::atomic<bool> g_flag{false};
}  // namespace

void arm_overflow_check() { g_armed.store(true, std::memory_order_relaxed); }

bool overflow_flag() { return g_flag.load(std::memory_order_relaxed); }

void clear_overflow_flag() { g_flag.store(false, std::memory_order_relaxed); }

void check_overflow(const at::Tensor& t) {
  if (C10_LIKELY(!g_armed.load(std::memory_order_relaxed))) return;
  if (!t.defined() || t.numel() == 0) return;
  if (t.scalar_type() != at::kHalf && t.scalar_type() != at::kBFloat16) return;
  if (!at::isfinite(t).all().item<bool>()) g_flag.store(true, std::memory_order_relaxed);
}

void check_overflow(const std::vector<c10::IValue>& outputs) {
  if (C10_LIKELY(!g_armed.load(std::memory_order_relaxed))) return;
  for (const auto& o : outputs) visit_tensors(o, [](const at::Tensor& t) { check_overflow(t); });
}

}  // namespace softnpu
