#include "commands.h"

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "format.h"

namespace npu_smi {
namespace {

// Long enough to average over many short kernels, short enough for an interactive command.
constexpr std::chrono::milliseconds kSampleInterval{150};

// A snapshot whose utilization covers kSampleInterval.
Snapshot sample(Sampler& sampler) {
  sampler.read();
  std::this_thread::sleep_for(kSampleInterval);
  return sampler.read();
}

std::string aicore(const Device& d) { return std::to_string(std::lround(d.aicore_percent)); }

std::string memory_usage(const Device& d) {
  return pad(std::to_string(to_mib(d.memory_used)), 4) + " / " + std::to_string(to_mib(d.memory_total));
}

}  // namespace

void print_info(std::ostream& out, Sampler& sampler) {
  Snapshot s = sample(sampler);
  BoxTable t(out);
  t.full_rule();
  t.wide(pad("npu-smi " SOFTNPU_VERSION, 33) + "Version: " SOFTNPU_VERSION);
  t.rule();
  t.row("NPU   Name", "Health", "Power(W)    Temp(C)");
  t.row("Chip", "AI Cores", "AICore(%)   Memory-Usage(MB)");
  t.rule('=');
  for (const Device& d : s.devices) {
    t.row(pad(std::to_string(d.id), 6) + d.name, "OK",
          pad(fixed(power_watts(d.aicore_percent), 1), 12) + std::to_string(temperature_c(d.aicore_percent)));
    t.row("0", std::to_string(d.compute_threads), pad(aicore(d), 12) + memory_usage(d));
    t.rule('=');
  }

  t.rule();
  t.row("NPU     Chip", "Process id", pad("Process name", 24) + " | Process memory(MB)");
  t.rule('=');
  for (const Device& d : s.devices) {
    bool any = false;
    for (const Process& p : s.processes) {
      if (p.device != d.id) continue;
      any = true;
      t.row(pad(std::to_string(d.id), 8) + "0", std::to_string(p.pid),
            pad(p.name, 24) + " | " + std::to_string(to_mib(p.memory_in_use)));
    }
    if (!any) t.wide("No running processes found in NPU " + std::to_string(d.id));
    t.rule('=');
  }
}

void print_json(std::ostream& out, Sampler& sampler) {
  Snapshot s = sample(sampler);
  out << "{\n  \"devices\": [";
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const Device& d = s.devices[i];
    out << (i ? ",\n" : "\n") << "    {\"id\": " << d.id << ", \"name\": " << json_string(d.name)
        << ", \"memory_total_mb\": " << to_mib(d.memory_total) << ", \"memory_used_mb\": " << to_mib(d.memory_used)
        << ", \"aicore_percent\": " << aicore(d) << "}";
  }
  out << (s.devices.empty() ? "],\n" : "\n  ],\n") << "  \"processes\": [";
  for (size_t i = 0; i < s.processes.size(); ++i) {
    const Process& p = s.processes[i];
    out << (i ? ",\n" : "\n") << "    {\"pid\": " << p.pid << ", \"name\": " << json_string(p.name)
        << ", \"device\": " << p.device << ", \"memory_mb\": " << to_mib(p.memory_in_use) << "}";
  }
  out << (s.processes.empty() ? "]\n}\n" : "\n  ]\n}\n");
}

void print_list(std::ostream& out, Sampler& sampler) {
  Snapshot s = sampler.read();
  out << "Total Count : " << s.devices.size() << "\n";
  for (const Device& d : s.devices) {
    out << "\n";
    print_fields(out, {{"NPU ID", std::to_string(d.id)},
                       {"Name", d.name},
                       {"Chip Count", "1"},
                       {"Health", "OK"},
                       {"Aicore Count", std::to_string(d.compute_threads)},
                       {"Memory Capacity(MB)", std::to_string(to_mib(d.memory_total))}});
  }
}

void print_detail(std::ostream& out, Sampler& sampler, Detail detail, int device) {
  Snapshot s = detail == Detail::kUsage ? sample(sampler) : sampler.read();
  const Device& d = s.devices[device];
  uint64_t total = to_mib(d.memory_total);
  uint64_t used = to_mib(d.memory_used);
  switch (detail) {
    case Detail::kUsage:
      print_fields(out, {{"NPU ID", std::to_string(d.id)},
                         {"Chip ID", "0"},
                         {"Memory Capacity(MB)", std::to_string(total)},
                         {"Memory Usage Rate(%)", std::to_string(percent_of(d.memory_used, d.memory_total))},
                         {"Aicore Usage Rate(%)", aicore(d)},
                         {"Aicore Count", std::to_string(d.compute_threads)}});
      break;
    case Detail::kMemory:
      print_fields(out, {{"NPU ID", std::to_string(d.id)},
                         {"Chip ID", "0"},
                         {"Memory Capacity(MB)", std::to_string(total)},
                         {"Memory Used(MB)", std::to_string(used)},
                         // Processes run with a larger SOFTNPU_MEMORY_MB may hold more than this capacity.
                         {"Memory Free(MB)", std::to_string(used < total ? total - used : 0)},
                         {"Memory Usage Rate(%)", std::to_string(percent_of(d.memory_used, d.memory_total))}});
      break;
    case Detail::kBoard:
      print_fields(out, {{"NPU ID", std::to_string(d.id)},
                         {"Name", d.name},
                         {"Software Version", SOFTNPU_VERSION},
                         {"Compatibility", "OK"},
                         {"Chip Count", "1"},
                         {"Aicore Count", std::to_string(d.compute_threads)},
                         {"Memory Capacity(MB)", std::to_string(total)}});
      break;
  }
}

void watch(std::ostream& out, Sampler& sampler, int device, double interval_s) {
  // Ctrl-C and SIGTERM are blocked and taken synchronously by the waits below, so the watch always ends between
  // two lines, with exit status 0.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  auto wait = [&](std::chrono::nanoseconds duration) {
    auto seconds = std::chrono::duration_cast<std::chrono::seconds>(duration);
    timespec timeout{static_cast<time_t>(seconds.count()), static_cast<long>((duration - seconds).count())};
    while (true) {
      if (sigtimedwait(&stop, nullptr, &timeout) > 0) return false;
      if (errno == EAGAIN) return true;  // the interval elapsed; EINTR (another signal) waits again
    }
  };

  constexpr int kColumn = 12;
  for (const char* heading : {"NpuID(Idx)", "ChipId(Idx)", "Pwr(W)", "Temp(C)", "AI Core(%)", "Memory(%)"})
    out << pad(heading, kColumn);
  out << "Memory(MB)\n" << std::flush;

  sampler.read();
  auto interval = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(interval_s));
  // The first line comes after a short sampling interval rather than a whole one.
  for (auto next = std::chrono::nanoseconds(kSampleInterval); wait(next); next = interval) {
    Snapshot s = sampler.read();
    for (const Device& d : s.devices) {
      if (device >= 0 && d.id != device) continue;
      out << pad(std::to_string(d.id), kColumn) << pad("0", kColumn)
          << pad(fixed(power_watts(d.aicore_percent), 1), kColumn)
          << pad(std::to_string(temperature_c(d.aicore_percent)), kColumn) << pad(aicore(d), kColumn)
          << pad(std::to_string(percent_of(d.memory_used, d.memory_total)), kColumn) << to_mib(d.memory_used)
          << "\n";
    }
    out << std::flush;
  }
}

}  // namespace npu_smi
