// Files in shared or user-named places (/dev/shm, ASCEND_PROCESS_LOG_PATH, /proc): another local user may have put
// anything there (a FIFO that blocks an open or a read forever, a symlink that redirects a write, a huge sparse
// file). So every such file is opened without following a final symlink and without blocking, checked on the open
// descriptor (never by path, which could change between the check and the use) and read with a bounded size.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace softnpu::rt::files {

// What an opened file must be, checked with fstat on its descriptor.
struct Expect {
  bool owned = true;        // owned by this process's effective uid
  off_t min_size = 0;
  off_t max_size = 1 << 20;
};

// Opens dir_fd/name (dir_fd may be AT_FDCWD) read-only with O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC and checks it is a
// regular file as expected. Returns the descriptor, or -1 with *why saying what the file is instead.
int open_checked(int dir_fd, const char* name, const Expect& expect, std::string* why);

// Up to max_bytes of a small file (a /proc entry), opened as open_checked does; false if it cannot be read.
bool read_small(const char* path, size_t max_bytes, std::string* out, bool owned = false);

// Opens path to append to, as a file of our own: created exclusively with mode 0600 when missing; an existing one must
// be a regular file owned by us with a single link. Never follows a final symlink. Returns the descriptor, or -1 with
// *why naming what is wrong.
int open_own_for_append(const std::string& path, std::string* why);

}  // namespace softnpu::rt::files
