#include "log.h"

#include "safe_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

namespace softnpu::rt::log {

std::atomic<int> g_level{kError};

namespace {

// Never destroyed: compute threads may still log while the process exits.
struct Sink {
  std::mutex mutex;
  bool to_stdout = false;
  std::string directory;
  std::string process_name;
  FILE* file = nullptr;
  bool file_failed = false;  // the file could not be opened: stderr instead, reported once
};

Sink& sink() {
  static Sink* const s = new Sink;
  return *s;
}

const char* level_name(Level level) {
  switch (level) {
    case kDebug: return "DEBUG";
    case kInfo: return "INFO";
    case kWarning: return "WARNING";
    default: return "ERROR";
  }
}

std::string read_process_name() {
  std::string name;
  files::read_small("/proc/self/comm", 64, &name);
  name = name.substr(0, name.find('\n'));
  return name.empty() ? "unknown" : name;
}

// mkdir -p
bool make_directories(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// Called with the sink's mutex held.
FILE* destination(Sink& s) {
  if (s.to_stdout) return stdout;
  if (s.file) return s.file;
  if (s.file_failed) return stderr;
  std::string path = s.directory + "/softnpu-" + std::to_string(getpid()) + ".log";
  // The directory may be shared (ASCEND_PROCESS_LOG_PATH=/tmp): a file already under our name that is not ours (a
  // planted symlink, another user's file) is refused rather than written through.
  std::string why;
  int fd = -1;
  if (make_directories(s.directory)) {
    fd = files::open_own_for_append(path, &why);
  } else {
    why = std::string("cannot create its directory: ") + std::strerror(errno);
  }
  if (fd >= 0) s.file = fdopen(fd, "a");
  if (s.file) return s.file;
  if (fd >= 0) ::close(fd);
  s.file_failed = true;
  std::fprintf(stderr, "[ERROR] softnpu: refusing the log file %s: %s; logging to stderr\n", path.c_str(),
               why.empty() ? std::strerror(errno) : why.c_str());
  return stderr;
}

}  // namespace

void configure(int level, bool to_stdout, const std::string& directory) {
  Sink& s = sink();
  std::lock_guard lock(s.mutex);
  if (s.file && (to_stdout || directory != s.directory)) {
    std::fclose(s.file);
    s.file = nullptr;
  }
  s.to_stdout = to_stdout;
  s.directory = directory;
  s.file_failed = false;
  g_level.store(level, std::memory_order_relaxed);
}

void close() {
  Sink& s = sink();
  std::lock_guard lock(s.mutex);
  if (s.file) std::fclose(s.file);
  s.file = nullptr;
}

void write(Level level, const char* file, int line, const char* format, ...) {
  char message[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof(message), format, args);
  va_end(args);

  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm local{};
  localtime_r(&now.tv_sec, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d-%H:%M:%S", &local);

  Sink& s = sink();
  std::lock_guard lock(s.mutex);
  if (s.process_name.empty()) s.process_name = read_process_name();
  FILE* out = destination(s);
  std::fprintf(out, "[%s] RUNTIME(%d,%s):%s.%06ld [%s:%d] %s\n", level_name(level), static_cast<int>(getpid()),
               s.process_name.c_str(), stamp, now.tv_nsec / 1000, file, line, message);
  std::fflush(out);
}

}  // namespace softnpu::rt::log
