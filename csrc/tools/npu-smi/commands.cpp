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

// "used / total" as Ascend aligns it: the used figure in five columns, so "3445 / 65536" but "60156/ 65536".
std::string usage(uint64_t used, uint64_t total) {
  return pad(std::to_string(used), 5) + "/ " + std::to_string(total);
}

std::string power(const Device& d) { return fixed(power_watts(d.aicore_percent), 1); }
std::string temperature(const Device& d) { return std::to_string(temperature_c(d.aicore_percent)); }
std::string hbm_rate(const Device& d) { return std::to_string(percent_of(d.memory_used, d.memory_total)); }

}  // namespace

void print_info(std::ostream& out, Sampler& sampler) {
  Snapshot s = sample(sampler);
  BoxTable t(out);
  t.full_rule();
  // Ascend's version line, saying in its free space what these devices are.
  t.wide(pad("npu-smi " SOFTNPU_NPU_SMI_VERSION, 33) + pad("Version: " SOFTNPU_NPU_SMI_VERSION, 32) +
         "softnpu " SOFTNPU_VERSION ": SOFTWARE NPUs");
  t.rule();
  t.row("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)");
  t.row("Chip", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)");
  t.rule('=');
  // As on a 910B: no huge pages, no DDR beside the HBM (both 0 / 0); device memory is HBM.
  for (const Device& d : s.devices) {
    t.row(pad(std::to_string(d.id), 6) + d.name, "OK", pad(power(d), 12) + pad(temperature(d), 18) + usage(0, 0));
    t.row("0", d.bus_id,
          pad(aicore(d), 12) + pad(usage(0, 0), 18) + usage(to_mib(d.memory_used), to_mib(d.memory_total)));
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
        << ", \"bus_id\": " << json_string(d.bus_id) << ", \"memory_total_mb\": " << to_mib(d.memory_total)
        << ", \"memory_used_mb\": " << to_mib(d.memory_used) << ", \"aicore_percent\": " << aicore(d) << "}";
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
  print_fields(out, {{"Total Count", std::to_string(s.devices.size())}});
  for (const Device& d : s.devices) {
    print_fields(out, {{"", ""},
                       {"NPU ID", std::to_string(d.id)},
                       {"Name", d.name},
                       {"Chip Count", "1"},
                       {"Health", "OK"},
                       {"Aicore Count", std::to_string(d.ai_cores)},
                       {"Memory Capacity(MB)", std::to_string(to_mib(d.memory_total))}});
  }
}

void print_mapping(std::ostream& out, Sampler& sampler) {
  // Ascend's columns of 31; each NPU is one chip whose logic id (the runtime's device number before
  // ASCEND_RT_VISIBLE_DEVICES) is its NPU ID. A software NPU has no MCU, so no "Mcu" rows.
  out << '\t' << pad("NPU ID", 31) << pad("Chip ID", 31) << pad("Chip Logic ID", 31) << pad("Chip Name", 30) << '\n';
  for (const Device& d : sampler.read().devices) {
    std::string chip = d.name.rfind("Ascend", 0) == 0 ? d.name : "Ascend " + d.name;  // the A3's is "Ascend910"
    out << '\t' << pad(std::to_string(d.id), 31) << pad("0", 31) << pad(std::to_string(d.id), 31) << chip << '\n';
  }
}

void print_detail(std::ostream& out, Sampler& sampler, Detail detail, int device, bool chip_given) {
  bool live = detail == Detail::kCommon || detail == Detail::kUsages || detail == Detail::kPower ||
              detail == Detail::kTemp;  // utilization, and the simulated figures that follow it
  Snapshot s = live ? sample(sampler) : sampler.read();
  const Device& d = s.devices[device];
  std::string id = std::to_string(d.id);
  std::string hbm_total = std::to_string(to_mib(d.memory_total));
  // Ascend answers some types per card (Chip Count, then each chip's block) and, with -c, for that chip alone.
  Fields head = chip_given ? Fields{{"NPU ID", id}, {"Chip ID", "0"}} : Fields{{"NPU ID", id}};
  Fields fields;
  switch (detail) {
    case Detail::kBoard:
      if (chip_given) {
        fields = head;
        fields.insert(fields.end(), {{"Chip Type", "Ascend"},
                                     {"Chip Name", d.name},
                                     {"Chip Version", "NA"},
                                     {"Board ID", "NA"},
                                     {"PCB ID", "NA"},
                                     {"BOM ID", "NA"},
                                     {"VDie ID", "NA"},
                                     {"NDie ID", "NA"},
                                     {"Chip Position ID", "0"},
                                     {"PCIe Bus Info", d.bus_id},
                                     {"Firmware Version", SOFTNPU_VERSION}});
        break;
      }
      fields = {{"NPU ID", id},
                {"Product Name", "softnpu SOFTWARE NPU"},
                {"Model", "NA"},
                {"Manufacturer", "softnpu"},
                {"Serial Number", "NA"},
                {"Software Version", SOFTNPU_NPU_SMI_VERSION},
                {"Firmware Version", SOFTNPU_VERSION},  // the software that is the device
                {"Compatibility", "OK"},
                {"Board ID", "NA"},
                {"PCB ID", "NA"},
                {"BOM Version", "NA"},
                {"PCIe Bus Info", d.bus_id},
                {"Slot ID", id},
                {"Class ID", "NA"},
                // No PCI device exists: no vendor or device ids to report.
                {"PCI Vendor ID", "NA"},
                {"PCI Device ID", "NA"},
                {"Subsystem Vendor ID", "NA"},
                {"Subsystem Device ID", "NA"},
                {"Chip Count", "1"},
                {"Chip Name", d.name},
                {"NPU Name", d.soc_name}};
      break;
    case Detail::kCommon:
      fields = chip_given ? head : Fields{{"NPU ID", id}, {"Chip Count", "1"}, {"", ""}, {"Chip ID", "0"}};
      fields.insert(fields.end(), {{"Memory Usage Rate(%)", "0"},
                                   {"HBM Usage Rate(%)", hbm_rate(d)},
                                   {"Aicore Usage Rate(%)", aicore(d)},
                                   {"Aicore Freq(MHZ)", std::to_string(d.clock_mhz)},
                                   {"Aicore curFreq(MHZ)", std::to_string(d.clock_mhz)},
                                   {"Aicore Count", std::to_string(d.ai_cores)},
                                   {"Temperature(C)", temperature(d)},
                                   {"NPU Real-time Power(W)", power(d)}});
      break;
    case Detail::kHealth:
      fields = head;
      fields.insert(fields.end(), {{chip_given ? "Health Status" : "Health", "OK"},
                                   {"Error Code", "NA"},
                                   {"Error Information", "NA"}});
      break;
    case Detail::kMemory:
      fields = head;
      fields.insert(fields.end(),
                    {{"DDR Capacity(MB)", "0"}, {"DDR Clock Speed(MHz)", "0"}, {"HBM Capacity(MB)", hbm_total}});
      if (!chip_given) fields.push_back({"Chip ID", "0"});
      break;
    case Detail::kPower:
      // Ascend names the card's figure and a chip's differently.
      fields = head;
      fields.push_back({chip_given ? "NPU Real-time Power(W)" : "Power Dissipation(W)", power(d)});
      break;
    case Detail::kTemp:
      fields = head;
      fields.push_back({"NPU Temperature(C)", temperature(d)});
      break;
    case Detail::kUsages:
      fields = chip_given ? head : Fields{{"NPU ID", id}, {"Chip Count", "1"}, {"", ""}};
      fields.insert(fields.end(), {{"DDR Capacity(MB)", "0"},
                                   {"DDR Usage Rate(%)", "0"},
                                   {"DDR Hugepages Total(page)", "0"},
                                   {"DDR Hugepages Usage Rate(%)", "0"},
                                   {"HBM Capacity(MB)", hbm_total},
                                   {"HBM Usage Rate(%)", hbm_rate(d)},
                                   {"Aicore Usage Rate(%)", aicore(d)}});
      if (!chip_given) fields.push_back({"Chip ID", "0"});
      break;
  }
  print_fields(out, fields);
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
          << pad(power(d), kColumn) << pad(temperature(d), kColumn) << pad(aicore(d), kColumn)
          << pad(hbm_rate(d), kColumn) << to_mib(d.memory_used)
          << "\n";
    }
    out << std::flush;
  }
}

}  // namespace npu_smi
