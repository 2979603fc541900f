#include "backend/env.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/env.h"

namespace softnpu {

namespace {

// Runs a parser, turning its EnvError into a RuntimeError for Python users.
template <typename F>
auto parse_or_throw(F&& f) {
  try {
    return f();
  } catch (const env::EnvError& e) {
    TORCH_CHECK(false, e.what());
  }
}

AllocatorConfig parse_allocator_config() {
  AllocatorConfig cfg;
  const char* raw = env::raw(env::Var::PYTORCH_NPU_ALLOC_CONF);
  if (!raw) return cfg;
  const std::string text(raw);
  auto bad = [&](const std::string& why) {
    env::fail(env::Var::PYTORCH_NPU_ALLOC_CONF, text,
              "comma-separated key:value pairs among max_split_size_mb:N (N > 20), "
              "garbage_collection_threshold:F (0 < F < 1), roundup_power2_divisions:N (a power of 2 up to 64); " +
                  why);
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    if (colon == std::string::npos) bad("'" + item + "' has no ':'");
    std::string key = item.substr(0, colon), value = item.substr(colon + 1);
    char* end = nullptr;
    if (key == "max_split_size_mb") {
      long long mb = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end || mb <= 20) bad("bad max_split_size_mb");
      cfg.max_split_size = static_cast<size_t>(mb) << 20;
    } else if (key == "garbage_collection_threshold") {
      double t = std::strtod(value.c_str(), &end);
      if (value.empty() || *end || !(t > 0 && t < 1)) bad("bad garbage_collection_threshold");
      cfg.garbage_collection_threshold = t;
    } else if (key == "roundup_power2_divisions") {
      long long d = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end || d < 1 || d > 64 || (d & (d - 1))) bad("bad roundup_power2_divisions");
      cfg.roundup_power2_divisions = static_cast<size_t>(d);
    } else if (key == "expandable_segments") {
      // Accepted for compatibility with scripts written for CUDA; the software device has no virtual memory
      // mapping to expand, so only False is meaningful.
      if (value != "False" && value != "false" && value != "0") bad("expandable_segments is not supported");
    } else {
      bad("unknown key '" + key + "'");
    }
  }
  return cfg;
}

}  // namespace

const AllocatorConfig& allocator_config() {
  static const AllocatorConfig cfg = parse_or_throw(parse_allocator_config);
  return cfg;
}

bool no_memory_caching() {
  static const bool v = parse_or_throw([] { return env::get_bool(env::Var::PYTORCH_NO_NPU_MEMORY_CACHING, false); });
  return v;
}

int oom_snapshot_mode() {
  static const int v =
      parse_or_throw([] { return static_cast<int>(env::get_int(env::Var::OOM_SNAPSHOT_ENABLE, 0, 0, 2)); });
  return v;
}

const std::string& oom_snapshot_path() {
  static const std::string v = env::get_string(env::Var::OOM_SNAPSHOT_PATH, ".");
  return v;
}

HalfCompute half_compute() {
  static const HalfCompute v = parse_or_throw([] {
    const std::string text = env::get_string(env::Var::SOFTNPU_HALF_COMPUTE, "auto");
    if (text == "auto") return HalfCompute::kAuto;
    if (text == "native") return HalfCompute::kNative;
    if (text == "float32") return HalfCompute::kFloat32;
    env::fail(env::Var::SOFTNPU_HALF_COMPUTE, text, "auto, native or float32");
  });
  return v;
}

bool fallback_cpu_disabled() {
  static const bool v =
      parse_or_throw([] { return env::get_bool(env::Var::TORCH_NPU_FALLBACK_CPU_DISABLE, false); });
  return v;
}

}  // namespace softnpu
