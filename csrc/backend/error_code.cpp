#include "backend/error_code.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>

#include "softnpu/runtime.h"

namespace softnpu {

namespace {

const char* submodule_name(SubModule m) {
  switch (m) {
    case SubModule::PTA: return "PTA";
    case SubModule::OPS: return "OPS";
    case SubModule::DIST: return "DIST";
    case SubModule::GRAPH: return "GRAPH";
    case SubModule::PROF: return "PROF";
    default: return "UNKNOWN";
  }
}

const char* code_text(ErrCode c) {
  switch (c) {
    case ErrCode::SUCCESS: return "success";
    case ErrCode::PARAM: return "invalid parameter";
    case ErrCode::TYPE: return "invalid type";
    case ErrCode::VALUE: return "invalid value";
    case ErrCode::PTR: return "invalid pointer";
    case ErrCode::INTERNAL: return "internal error";
    case ErrCode::MEMORY: return "memory error";
    case ErrCode::NOT_SUPPORT: return "feature not supported";
    case ErrCode::NOT_FOUND: return "resource not found";
    case ErrCode::UNAVAIL: return "resource unavailable";
    case ErrCode::SYSCALL: return "system call failed";
    case ErrCode::TIMEOUT: return "timeout error";
    case ErrCode::PERMISSION: return "permission error";
    case ErrCode::ACL: return "call acl api failed";
    case ErrCode::HCCL: return "call hccl api failed";
    case ErrCode::GE: return "call ge api failed";
    default: return "application exception";
  }
}

}  // namespace

std::string error_code(SubModule submodule, ErrCode code, int rank) {
  int device = -1;
  if (snpuIsInitialized() && snpuGetDevice(&device) != snpuSuccess) device = -1;
  char when[32] = "";
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  if (localtime_r(&now, &local)) std::strftime(when, sizeof when, "%Y-%m-%d-%H:%M:%S", &local);
  char line[160];
  std::snprintf(line, sizeof line, "\n[ERROR] %s (PID:%d, Device:%d, RankID:%d) ERR%02d%03d %s %s", when,
                static_cast<int>(getpid()), device, rank, static_cast<int>(submodule), static_cast<int>(code),
                submodule_name(submodule), code_text(code));
  return line;
}

}  // namespace softnpu
