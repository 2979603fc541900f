// Test support for the runtime's tests: checked calls, kernels from lambdas, a gate that holds a stream, and an
// environment that re-initializes the runtime.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "softnpu/runtime.h"

#define ASSERT_SNPU(call) ASSERT_EQ((call), snpuSuccess) << snpuGetLastErrorMessage()
#define EXPECT_SNPU(call) EXPECT_EQ((call), snpuSuccess) << snpuGetLastErrorMessage()

namespace softnpu::test {

using namespace std::chrono_literals;

// Launches f as a kernel; it returns the kernel's code.
inline snpuError_t launch(snpuStream_t stream, const char* name, std::function<int()> f) {
  auto* fn = new std::function<int()>(std::move(f));
  return snpuLaunchKernel(
      stream, name, [](void* arg) { return (*static_cast<std::function<int()>*>(arg))(); }, fn,
      [](void* arg) { delete static_cast<std::function<int()>*>(arg); });
}

// Polls cond for up to timeout.
inline bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout = 10s) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// A kernel that holds its stream (and its compute thread) until the test opens the gate. It gives up after 10 s
// with an error, so a failing test does not hang.
class Gate {
 public:
  snpuError_t hold(snpuStream_t stream) {
    return launch(stream, "gate", [this] {
      started_.store(true);
      if (eventually([this] { return open_.load(); })) return 0;
      snpuKernelSetErrorMessage("the gate was never opened");
      return 1;
    });
  }
  // Waits until the gate kernel runs.
  bool wait_started() {
    return eventually([this] { return started_.load(); });
  }
  void open() { open_.store(true); }
  ~Gate() { open(); }

 private:
  std::atomic<bool> started_{false};
  std::atomic<bool> open_{false};
};

// Sets environment variables (nullptr unsets) and re-initializes the runtime so it reads them; restores both on
// destruction. init_result() is what snpuInit returned.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars)
      : ScopedEnv(std::vector<std::pair<const char*, const char*>>(vars)) {}
  explicit ScopedEnv(const std::vector<std::pair<const char*, const char*>>& vars) {
    snpuShutdown();
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value) {
        setenv(name, value, 1);
      } else {
        unsetenv(name);
      }
    }
    init_result_ = snpuInit();
  }
  ~ScopedEnv() {
    snpuShutdown();
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  snpuError_t init_result() const { return init_result_; }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
  snpuError_t init_result_;
};

inline std::string last_message() { return snpuGetLastErrorMessage(); }

}  // namespace softnpu::test
