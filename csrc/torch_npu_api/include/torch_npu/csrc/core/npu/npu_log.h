// torch_npu's log macros (printf formats): ASCEND_LOGE / LOGW / LOGI / LOGD write to stderr when
// ASCEND_GLOBAL_LOG_LEVEL (0 debug, 1 info, 2 warning, 3 error -- the default --, 4 none) lets their level through.
#pragma once

namespace c10_npu::log {

enum Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

bool enabled(int level);
void write(int level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace c10_npu::log

#define TORCH_NPU_API_LOG_(level, format, ...)                                                    \
  do {                                                                                            \
    if (c10_npu::log::enabled(level)) c10_npu::log::write(level, format, ##__VA_ARGS__);          \
  } while (0)
#define ASCEND_LOGE(format, ...) TORCH_NPU_API_LOG_(c10_npu::log::kError, format, ##__VA_ARGS__)
#define ASCEND_LOGW(format, ...) TORCH_NPU_API_LOG_(c10_npu::log::kWarning, format, ##__VA_ARGS__)
#define ASCEND_LOGI(format, ...) TORCH_NPU_API_LOG_(c10_npu::log::kInfo, format, ##__VA_ARGS__)
#define ASCEND_LOGD(format, ...) TORCH_NPU_API_LOG_(c10_npu::log::kDebug, format, ##__VA_ARGS__)
