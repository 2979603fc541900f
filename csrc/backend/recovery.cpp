#include "backend/recovery.h"

#include <c10/util/Exception.h>

#include <mutex>
#include <unordered_set>

#include "backend/error_code.h"

namespace softnpu::recovery {

std::atomic<bool> g_any_unsafe{false};

namespace {

std::atomic<bool> g_check{false};

struct Unsafe {
  std::mutex mutex;
  std::unordered_set<const void*> blocks;
};

Unsafe& unsafe() {
  static Unsafe u;
  return u;
}

}  // namespace

void mark_unsafe(const void* block) {
  if (!block) return;
  Unsafe& u = unsafe();
  std::lock_guard lock(u.mutex);
  u.blocks.insert(block);
  g_any_unsafe.store(true, std::memory_order_relaxed);
}

void mark_safe(const void* block) {
  Unsafe& u = unsafe();
  std::lock_guard lock(u.mutex);
  u.blocks.erase(block);
  g_any_unsafe.store(!u.blocks.empty(), std::memory_order_relaxed);
}

bool is_safe(const void* block) {
  if (!any_unsafe()) return true;
  Unsafe& u = unsafe();
  std::lock_guard lock(u.mutex);
  return !u.blocks.contains(block);
}

void set_check(bool on) { g_check.store(on, std::memory_order_relaxed); }

bool check_enabled() { return g_check.load(std::memory_order_relaxed); }

void check_safe(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone() || !check_enabled() || !t.has_storage()) return;
  TORCH_CHECK(is_safe(t.storage().data()), "There is unsafe data in the input tensor.",
              error_code(SubModule::PTA, ErrCode::VALUE));
}

}  // namespace softnpu::recovery
