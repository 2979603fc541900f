// Test support: runs programs with pipes on their standard streams (posix_spawn, so it is safe in a process whose
// runtime already has threads).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace softnpu::test {

// A running program; killed and reaped on destruction if still running, so a failing test leaves nothing behind.
class Child {
 public:
  // argv[0] is the program's path. env: "NAME=value" entries added to (or replacing those of) this environment.
  explicit Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);

    std::vector<std::string> environment;
    for (char** e = environ; *e; ++e) {
      std::string entry = *e;
      bool replaced = false;
      for (const std::string& o : env)
        replaced |= entry.compare(0, o.find('=') + 1, o, 0, o.find('=') + 1) == 0;
      if (!replaced) environment.push_back(entry);
    }
    environment.insert(environment.end(), env.begin(), env.end());
    std::vector<char*> args, envp;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
    args.push_back(nullptr);
    envp.push_back(nullptr);

    int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    close(err[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    stderr_ = err[0];
    if (rc != 0) throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      wait();
    }
    for (int fd : {stdin_, stdout_, stderr_})
      if (fd >= 0) close(fd);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // The next line of standard output (without its newline), or nothing at end of file or after timeout.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (size_t nl = out_.find('\n'); nl != std::string::npos) {
        std::string line = out_.substr(0, nl);
        out_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{stdout_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, int(left.count())) <= 0) return std::nullopt;
      char buf[4096];
      ssize_t n = ::read(stdout_, buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      out_.append(buf, size_t(n));
    }
  }

  // Closes the child's standard input: the programs of these tests take that as the signal to exit.
  void close_stdin() {
    close(stdin_);
    stdin_ = -1;
  }

  void signal(int sig) { kill(pid_, sig); }

  // Reads both outputs to their end and reaps the child; returns the waitpid status.
  int wait(std::string* out = nullptr, std::string* err = nullptr) {
    std::string error;
    drain(&error);
    if (out) *out = std::move(out_);
    if (err) *err = std::move(error);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  void drain(std::string* err) {
    pollfd p[2] = {{stdout_, POLLIN, 0}, {stderr_, POLLIN, 0}};
    std::string* sink[2] = {&out_, err};
    int open = 2;
    while (open > 0 && poll(p, 2, -1) > 0) {
      for (int i = 0; i < 2; ++i) {
        if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[4096];
        ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
        if (n > 0) {
          sink[i]->append(buf, size_t(n));
        } else {
          p[i].fd = -1;
          --open;
        }
      }
    }
  }

  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1, stderr_ = -1;
  std::string out_;  // standard output read but not yet consumed
};

struct Result {
  int exit_code = -1;  // -1 if killed by a signal
  std::string out;
  std::string err;
};

// Runs a program to completion.
inline Result run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  Child child(argv, env);
  child.close_stdin();
  Result r;
  int status = child.wait(&r.out, &r.err);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace softnpu::test
