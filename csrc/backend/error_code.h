// torch_npu's error codes: its errors end with a line such as
//   [ERROR] 2026-01-01-12:00:00 (PID:123, Device:0, RankID:-1) ERR00003 PTA invalid value
// (ERR, the component as two digits, the code as three), which log scrapers and its exception handler match. Every
// error softnpu raises where torch_npu would carry one gets it from error_code(), the Python side included
// (softnpu._C._error_code, used by torch_npu.utils.error_code).
#pragma once

#include <string>

namespace softnpu {

// torch_npu's components (its _SubModuleID).
enum class SubModule : int { PTA = 0, OPS = 1, DIST = 2, GRAPH = 3, PROF = 4, UNKNOWN = 99 };

// torch_npu's codes (its ErrCode).
enum class ErrCode : int {
  SUCCESS = 0,
  PARAM = 1,
  TYPE = 2,
  VALUE = 3,
  PTR = 4,
  INTERNAL = 5,
  MEMORY = 6,
  NOT_SUPPORT = 7,
  NOT_FOUND = 8,
  UNAVAIL = 9,
  SYSCALL = 10,
  TIMEOUT = 11,
  PERMISSION = 12,
  ACL = 100,
  HCCL = 200,
  GE = 300,
  EXCEPT = 999,
};

// The suffix for an error message: a newline and the [ERROR] line, with the time, this process, the current device
// (-1 before the runtime starts: asking would start it) and the rank (-1 unless given).
std::string error_code(SubModule submodule, ErrCode code, int rank = -1);

}  // namespace softnpu
