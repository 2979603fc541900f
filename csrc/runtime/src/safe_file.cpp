#include "safe_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace softnpu::rt::files {

namespace {

std::string describe(const struct stat& st) {
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  return "not a regular file";
}

// Why the open descriptor is not what expect asks for, or "" if it is.
std::string check(int fd, const Expect& expect) {
  struct stat st;
  if (fstat(fd, &st) != 0) return std::string("cannot be examined: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return describe(st);
  if (expect.owned && st.st_uid != geteuid())
    return "owned by uid " + std::to_string(st.st_uid) + ", not by uid " + std::to_string(geteuid());
  if (st.st_size < expect.min_size || st.st_size > expect.max_size)
    return "of " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(expect.min_size) +
           (expect.max_size == expect.min_size ? "" : " to " + std::to_string(expect.max_size));
  return "";
}

std::string open_failure(int error) {
  // O_NOFOLLOW reports a final symlink as ELOOP.
  if (error == ELOOP) return "a symbolic link";
  return std::strerror(error);
}

}  // namespace

int open_checked(int dir_fd, const char* name, const Expect& expect, std::string* why) {
  int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = open_failure(errno);
    return -1;
  }
  *why = check(fd, expect);
  if (!why->empty()) {
    close(fd);
    return -1;
  }
  return fd;
}

bool read_small(const char* path, size_t max_bytes, std::string* out, bool owned) {
  // /proc files report size 0: the bound is on what is read, not on st_size.
  Expect expect{owned, 0, static_cast<off_t>(max_bytes)};
  std::string why;
  int fd = open_checked(AT_FDCWD, path, expect, &why);
  if (fd < 0) return false;
  out->assign(max_bytes, '\0');
  size_t got = 0;
  while (got < max_bytes) {
    ssize_t n = read(fd, out->data() + got, max_bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  out->resize(got);
  return got > 0;
}

int open_own_for_append(const std::string& path, std::string* why) {
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EEXIST) {
    *why = open_failure(errno);
    return -1;
  }
  // Ours from before: this process reopening it after snpuShutdown, or a dead process of ours with the same pid.
  fd = open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = open_failure(errno);
    return -1;
  }
  Expect expect{true, 0, static_cast<off_t>(INT64_MAX)};
  *why = check(fd, expect);
  struct stat st;
  if (why->empty() && fstat(fd, &st) == 0 && st.st_nlink != 1)
    *why = "a file with " + std::to_string(st.st_nlink) + " hard links";
  if (!why->empty()) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace softnpu::rt::files
