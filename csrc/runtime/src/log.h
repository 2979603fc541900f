// The runtime's log, in the manner of Ascend's plog: ASCEND_GLOBAL_LOG_LEVEL filters, ASCEND_SLOG_PRINT_TO_STDOUT
// chooses stdout over a file under ASCEND_PROCESS_LOG_PATH. Use SNPU_LOG: it tests the level before formatting, so
// a disabled message costs one relaxed load.
#pragma once

#include <atomic>
#include <string>

namespace softnpu::rt::log {

enum Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kNone = 4 };

extern std::atomic<int> g_level;

inline bool enabled(Level level) { return level >= g_level.load(std::memory_order_relaxed); }

// Applies the configuration (at snpuInit). Until then, errors go to the default destination.
void configure(int level, bool to_stdout, const std::string& directory);

// Flushes and closes the log file, if one is open (at snpuShutdown); the next message opens it again.
void close();

void write(Level level, const char* file, int line, const char* format, ...) __attribute__((format(printf, 4, 5)));

}  // namespace softnpu::rt::log

#define SNPU_LOG(level, ...)                                                              \
  do {                                                                                    \
    if (::softnpu::rt::log::enabled(level))                                               \
      ::softnpu::rt::log::write(level, __FILE_NAME__, __LINE__, __VA_ARGS__);             \
  } while (0)
