// The log behind torch_npu's ASCEND_LOG* macros: the level from ASCEND_GLOBAL_LOG_LEVEL (declared in
// csrc/common/env_vars.def, read once; a malformed value raises naming it), messages to stderr.
#include "torch_npu/csrc/core/npu/npu_log.h"

#include <c10/util/Exception.h>

#include <cstdarg>
#include <cstdio>

#include "common/env.h"

namespace c10_npu::log {

namespace {

int threshold() {
  static const int level = [] {
    try {
      return static_cast<int>(softnpu::env::get_int(softnpu::env::Var::ASCEND_GLOBAL_LOG_LEVEL, kError, 0, 4));
    } catch (const softnpu::env::EnvError& e) {
      TORCH_CHECK(false, e.what());
    }
  }();
  return level;
}

constexpr const char* kNames[] = {"DEBUG", "INFO", "WARNING", "ERROR"};

}  // namespace

bool enabled(int level) { return level >= threshold(); }

void write(int level, const char* format, ...) {
  char message[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof(message), format, args);
  va_end(args);
  std::fprintf(stderr, "[%s] torch_npu: %s\n", kNames[level < 0 ? 0 : level > 3 ? 3 : level], message);
}

}  // namespace c10_npu::log
