// Handles given to callers for streams and events. A handle is not the object's address but a slot index plus the
// slot's generation, so a destroyed handle, or one from before snpuShutdown, is recognized as invalid instead of
// being dereferenced. Lookups take no lock: slots live in chunks that are never moved or freed.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace softnpu::rt {

template <class T>
class HandleTable {
 public:
  // Registers object and returns its new handle, or null when every slot is in use.
  void* insert(T* object) {
    std::lock_guard lock(mutex_);
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      if (used_ == kMaxChunks * kChunkSize) return nullptr;
      index = used_++;
      if ((index & kChunkMask) == 0)
        chunks_[index >> kChunkBits].store(new Slot[kChunkSize], std::memory_order_release);
    }
    Slot& s = slot(index);
    ++s.generation;
    uint64_t key = (uint64_t(s.generation) << 32) | (uint64_t(index) + 1);
    s.object.store(object, std::memory_order_relaxed);
    s.key.store(key, std::memory_order_release);
    return reinterpret_cast<void*>(static_cast<uintptr_t>(key));
  }

  // The object of a live handle, or null.
  T* find(const void* handle) const {
    const Slot* s = lookup(handle);
    return s ? s->object.load(std::memory_order_acquire) : nullptr;
  }

  // Invalidates a live handle and returns its object, or null if the handle was not live.
  T* remove(const void* handle) {
    std::lock_guard lock(mutex_);
    Slot* s = const_cast<Slot*>(lookup(handle));
    if (!s) return nullptr;
    T* object = s->object.load(std::memory_order_relaxed);
    release(s, static_cast<uint32_t>((reinterpret_cast<uintptr_t>(handle) & 0xffffffffu) - 1));
    return object;
  }

  // Invalidates every live handle and returns their objects (at snpuShutdown).
  std::vector<T*> remove_all() {
    std::lock_guard lock(mutex_);
    std::vector<T*> objects;
    for (uint32_t i = 0; i < used_; ++i) {
      Slot& s = slot(i);
      if (s.key.load(std::memory_order_relaxed) == 0) continue;
      objects.push_back(s.object.load(std::memory_order_relaxed));
      release(&s, i);
    }
    return objects;
  }

 private:
  static constexpr uint32_t kChunkBits = 10;
  static constexpr uint32_t kChunkSize = 1u << kChunkBits;
  static constexpr uint32_t kChunkMask = kChunkSize - 1;
  static constexpr uint32_t kMaxChunks = 1u << 12;  // about four million live handles

  struct Slot {
    std::atomic<uint64_t> key{0};  // 0 while free
    std::atomic<T*> object{nullptr};
    uint32_t generation = 0;       // guarded by mutex_
  };

  Slot& slot(uint32_t index) const {
    return chunks_[index >> kChunkBits].load(std::memory_order_acquire)[index & kChunkMask];
  }

  const Slot* lookup(const void* handle) const {
    uint64_t key = reinterpret_cast<uintptr_t>(handle);
    uint64_t low = key & 0xffffffffu;
    if (low == 0 || ((low - 1) >> kChunkBits) >= kMaxChunks) return nullptr;
    uint32_t index = static_cast<uint32_t>(low - 1);
    const Slot* chunk = chunks_[index >> kChunkBits].load(std::memory_order_acquire);
    if (!chunk) return nullptr;
    const Slot& s = chunk[index & kChunkMask];
    return s.key.load(std::memory_order_acquire) == key ? &s : nullptr;
  }

  // Called with mutex_ held.
  void release(Slot* s, uint32_t index) {
    s->key.store(0, std::memory_order_release);
    s->object.store(nullptr, std::memory_order_relaxed);
    free_.push_back(index);
  }

  mutable std::atomic<Slot*> chunks_[kMaxChunks] = {};
  std::mutex mutex_;
  uint32_t used_ = 0;            // slots ever handed out
  std::vector<uint32_t> free_;   // released slots, reused first
};

}  // namespace softnpu::rt
