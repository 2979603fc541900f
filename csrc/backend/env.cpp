#include "backend/env.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

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

bool is_pow2(long long v) { return v > 0 && (v & (v - 1)) == 0; }

// The items of a key:value list: commas inside [...] belong to the value (roundup_power2_divisions' list form).
std::vector<std::string> split_items(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      items.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  items.push_back(item);
  return items;
}

// The keys torch_npu's _set_allocator_settings changes at run time; the others are fixed at the first allocation.
bool settable_at_run_time(const std::string& key) {
  static const std::set<std::string> keys = {
      "expandable_segments",         "max_split_size_mb",          "max_non_split_rounding_mb",
      "release_lock_on_npumalloc",   "throw_on_npumalloc_oom",     "per_process_memory_fraction",
      "pinned_max_round_threshold_mb", "pinned_max_cached_size_mb"};
  return keys.count(key) != 0;
}

// Applies `text` (PYTORCH_NPU_ALLOC_CONF's syntax) over cfg. bad(why) throws; at run time (set_allocator_settings), a
// key torch_npu does not change at run time is refused with ValueError as torch_npu's.
template <typename Bad>
void parse_allocator_config(const std::string& text, AllocatorConfig& cfg, bool at_run_time, Bad bad) {
  auto to_int = [&](const std::string& key, const std::string& value) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end || errno == ERANGE) bad("bad " + key + " '" + value + "'");
    return v;
  };
  auto to_bool = [&](const std::string& key, const std::string& value) {
    if (value == "True" || value == "true" || value == "1") return true;
    if (value == "False" || value == "false" || value == "0") return false;
    bad("bad " + key + " '" + value + "'");
    return false;
  };
  auto divisions = [&](const std::string& value, bool zero_allowed) {
    const long long d = to_int("roundup_power2_divisions", value);
    if (!((zero_allowed && d == 0) || (is_pow2(d) && d <= 64)))
      bad("bad roundup_power2_divisions '" + value + "' (divisions must be a power of 2 up to 64)");
    return static_cast<size_t>(d);
  };
  for (const std::string& item : split_items(text)) {
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    if (colon == std::string::npos) bad("'" + item + "' has no ':'");
    const std::string key = item.substr(0, colon), value = item.substr(colon + 1);
    if (at_run_time && !settable_at_run_time(key)) {
      TORCH_CHECK_VALUE(false, "torch_npu.npu.memory._set_allocator_settings() unsupported setting: ", key);
    }
    if (key == "max_split_size_mb") {
      const long long mb = to_int(key, value);
      if (mb <= 20) bad("bad max_split_size_mb");
      // As c10's, a size beyond what fits in bytes means no limit (how a run-time setting lifts one).
      cfg.max_split_size = static_cast<size_t>(mb) >= (SIZE_MAX >> 20) ? SIZE_MAX : static_cast<size_t>(mb) << 20;
    } else if (key == "garbage_collection_threshold") {
      char* end = nullptr;
      const double t = std::strtod(value.c_str(), &end);
      if (value.empty() || *end || !(t > 0 && t < 1)) bad("bad garbage_collection_threshold");
      cfg.garbage_collection_threshold = t;
    } else if (key == "roundup_power2_divisions" && !value.empty() && value.front() == '[') {
      if (value.back() != ']') bad("roundup_power2_divisions' list has no closing ']'");
      // As c10 reads the list: MiB:N sets the interval starting at MiB (the first entry also every interval below
      // it), >:N every interval after the last boundary (or after the first interval); intervals between two boundaries
      // keep 0 (512-byte rounding).
      size_t last = 0;
      bool first = true;
      bool open_end = false;
      for (const std::string& entry : split_items(value.substr(1, value.size() - 2))) {
        const size_t c = entry.find(':');
        if (c == std::string::npos || open_end) bad("bad roundup_power2_divisions entry '" + entry + "'");
        const std::string bound = entry.substr(0, c);
        const size_t d = divisions(entry.substr(c + 1), true);
        if (bound == ">") {
          open_end = true;
          for (size_t i = last + 1; i < AllocatorConfig::kRoundupIntervals; ++i)
            cfg.roundup_power2_divisions[i] = d;
          continue;
        }
        const long long mib = to_int("roundup_power2_divisions boundary", bound);
        if (!is_pow2(mib)) bad("roundup_power2_divisions boundary '" + bound + "' is not a power of 2 (MiB)");
        const size_t index = std::min<size_t>(static_cast<size_t>(63 - __builtin_clzll(static_cast<uint64_t>(mib))),
                                              AllocatorConfig::kRoundupIntervals - 1);
        if (!first && index <= last) bad("roundup_power2_divisions boundaries must increase");
        if (first) std::fill(cfg.roundup_power2_divisions, cfg.roundup_power2_divisions + index, d);
        cfg.roundup_power2_divisions[index] = d;
        last = index;
        first = false;
      }
    } else if (key == "roundup_power2_divisions") {
      const size_t d = divisions(value, false);
      for (size_t& v : cfg.roundup_power2_divisions) v = d;
    } else if (key == "expandable_segments") {
      cfg.expandable_segments = to_bool(key, value);
    } else if (key == "segment_size_mb") {
      // torch_npu's bounds. It warns that the key is deprecated; softnpu documents it (csrc/backend/allocator.h).
      const long long mb = to_int(key, value);
      if (mb < 20 || mb > 512) bad("bad segment_size_mb (torch_npu's bounds: 20 to 512 MiB)");
      cfg.segment_size = static_cast<size_t>(mb) << 20;
    } else if (key == "large_segment_size_mb") {
      const long long mb = to_int(key, value);
      if (mb < 10 || mb > (1 << 20)) bad("bad large_segment_size_mb (a large segment holds requests up to 10 MiB)");
      cfg.large_segment_size = static_cast<size_t>(mb) << 20;
    } else if (key == "per_process_memory_fraction") {
      char* end = nullptr;
      const double f = std::strtod(value.c_str(), &end);
      if (value.empty() || *end || !(f > 0 && f <= 1)) bad("bad per_process_memory_fraction");
      cfg.memory_fraction = f;
    } else if (key == "pinned_use_background_threads") {
      cfg.pinned_use_background_threads = to_bool(key, value);
    } else if (key == "throw_on_npumalloc_oom") {
      cfg.throw_on_oom = to_bool(key, value);
    } else if (key == "max_non_split_rounding_mb") {
      // c10's bound: at least a large segment.
      const long long mb = to_int(key, value);
      if (mb < static_cast<long long>(cfg.large_segment_size >> 20))
        bad("bad max_non_split_rounding_mb (at least large_segment_size_mb)");
      cfg.max_non_split_rounding =
          static_cast<size_t>(mb) >= (SIZE_MAX >> 20) ? SIZE_MAX : static_cast<size_t>(mb) << 20;
    } else if (key == "pinned_max_round_threshold_mb" || key == "pinned_max_cached_size_mb") {
      const long long mb = to_int(key, value);
      if (mb < 0) bad("bad " + key + " (a size in MiB)");
      (key == "pinned_max_round_threshold_mb" ? cfg.pinned_max_round_threshold : cfg.pinned_max_cached_size) =
          static_cast<size_t>(mb) >= (SIZE_MAX >> 20) ? SIZE_MAX : static_cast<size_t>(mb) << 20;
    } else if (key == "pin_memory_expandable_segments") {
      cfg.pin_memory_expandable_segments = to_bool(key, value);
    } else if (key == "pinned_mem_register" || key == "multi_stream_lazy_reclaim" ||
               key == "release_lock_on_npumalloc") {
      to_bool(key, value);  // torch_npu's switches of its own allocators: accepted, no effect here
    } else if (key == "pinned_reserve_segment_size_mb" || key == "base_addr_aligned_kb") {
      if (to_int(key, value) < 0) bad("bad " + key + " (a size must not be negative)");
    } else if (key == "page_size") {
      if (value != "1g") bad("bad page_size '" + value + "' (torch_npu takes 1g)");
    } else {
      bad("unknown key '" + key + "'");
    }
  }
  if (cfg.max_split_size != SIZE_MAX && cfg.max_split_size < cfg.large_segment_size)
    bad("max_split_size_mb is below large_segment_size_mb");
  // The expandable pinned allocator neither rounds nor caps its cache (torch_npu's warning, once).
  if (cfg.pin_memory_expandable_segments &&
      (cfg.pinned_max_round_threshold != SIZE_MAX || cfg.pinned_max_cached_size != SIZE_MAX))
    TORCH_WARN_ONCE("`pinned_max_round_threshold_mb` and `pinned_max_cached_size_mb` do not take effect when "
                    "`pin_memory_expandable_segments` is enabled. To use these options, set "
                    "`pin_memory_expandable_segments` to `False`.");
}

const char* kAllocConfSyntax =
    "comma-separated key:value pairs among max_split_size_mb:N (N > 20), max_non_split_rounding_mb:N (N >= "
    "large_segment_size_mb), garbage_collection_threshold:F (0 < F < 1), roundup_power2_divisions:N (a power of 2 up "
    "to 64) or [MiB:N,...,>:N] (increasing powers of 2, N 0 or a power of 2 up to 64), expandable_segments:B, "
    "segment_size_mb:N (N >= 1), large_segment_size_mb:N (N >= 10), per_process_memory_fraction:F (0 < F <= 1), "
    "throw_on_npumalloc_oom:B, pinned_use_background_threads:B (B True or False), pinned_max_round_threshold_mb:N, "
    "pinned_max_cached_size_mb:N, pin_memory_expandable_segments:B (torch_npu's expandable pinned allocator; NPU graph captures refuse it), "
    "and torch_npu's keys accepted without effect here (pinned_mem_register, multi_stream_lazy_reclaim, release_lock_on_npumalloc: B; pinned_reserve_segment_size_mb, "
    "base_addr_aligned_kb: N >= 0; page_size:1g); ";

// Every configuration published stays alive: allocator_config()'s references outlive a change.
std::mutex g_config_mutex;
std::deque<std::unique_ptr<const AllocatorConfig>> g_configs;
std::atomic<const AllocatorConfig*> g_config{nullptr};

const AllocatorConfig* publish(AllocatorConfig cfg) {
  g_configs.push_back(std::make_unique<const AllocatorConfig>(cfg));
  g_config.store(g_configs.back().get(), std::memory_order_release);
  return g_configs.back().get();
}

const AllocatorConfig* initial_config() {
  AllocatorConfig cfg;
  if (const char* raw = env::raw(env::Var::PYTORCH_NPU_ALLOC_CONF)) {
    const std::string text(raw);
    parse_or_throw([&] {
      parse_allocator_config(text, cfg, false, [&](const std::string& why) {
        env::fail(env::Var::PYTORCH_NPU_ALLOC_CONF, text, kAllocConfSyntax + why);
      });
    });
  }
  std::lock_guard<std::mutex> lock(g_config_mutex);
  return publish(cfg);
}

}  // namespace

const AllocatorConfig& allocator_config() {
  static const AllocatorConfig* const first = initial_config();
  const AllocatorConfig* cfg = g_config.load(std::memory_order_acquire);
  return cfg ? *cfg : *first;
}

const AllocatorConfig& set_allocator_settings(const std::string& settings) {
  AllocatorConfig cfg = allocator_config();
  std::lock_guard<std::mutex> lock(g_config_mutex);
  cfg = *g_config.load(std::memory_order_acquire);  // the latest, now that no other change can be under way
  parse_allocator_config(settings, cfg, true, [&](const std::string& why) {
    TORCH_CHECK(false, "torch.npu.memory._set_allocator_settings('", settings, "'): ", why);
  });
  return *publish(cfg);
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
