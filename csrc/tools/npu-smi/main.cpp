// npu-smi: the device and process view of softnpu, in the manner of Ascend's npu-smi. Command line parsing and
// exit codes: 0 success, 1 a failure reading the devices (e.g. a malformed SOFTNPU_DEVICE_COUNT), 2 a usage error.
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"

namespace {

constexpr const char* kUsage = R"(Usage: npu-smi info [OPTIONS]

  npu-smi info                      devices and the processes using them
  npu-smi info --json               the same as JSON, for scripts
  npu-smi info -l                   device count and a summary of each device
  npu-smi info -m                   the chip mapping: NPU ID, Chip ID, Chip Logic ID, Chip Name
  npu-smi info -t TYPE -i ID [-c 0] details of device ID (of its chip with -c); TYPE is board, common, health,
                                    memory, power, temp or usages (or usage)
  npu-smi info watch [-i ID] [-d SECONDS]
                                    a line per device every SECONDS (default 1) until Ctrl-C
  npu-smi -h, --help                this help

  These are softnpu's SOFTWARE NPUs, presenting as the chip SOFTNPU_SOC_VERSION selects. Power and temperature are
  SIMULATED (no sensors): they follow AICore(%). The bus ids are identifiers, no PCI device exists.
  -c CHIP may follow -i ID as on Ascend; each softnpu NPU has one chip, 0.
  npu-smi sees the devices of its own configuration (SOFTNPU_DEVICE_COUNT, SOFTNPU_MEMORY_MB, SOFTNPU_CORES).
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Mode { kTable, kJson, kList, kMapping, kDetail, kWatch };

struct Options {
  Mode mode = Mode::kTable;
  npu_smi::Detail detail = npu_smi::Detail::kUsages;
  std::optional<int> device;  // -i
  bool chip_given = false;    // -c
  double interval_s = 1.0;    // -d
};

int parse_int(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < 0 || value > 1'000'000)
    throw UsageError(flag + " expects a non-negative integer, got '" + text + "'");
  return static_cast<int>(value);
}

double parse_seconds(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= 0.1 && value <= 3600))
    throw UsageError("-d expects seconds from 0.1 to 3600, got '" + text + "'");
  return value;
}

// The options, or nothing when help was asked for.
std::optional<Options> parse(const std::vector<std::string>& args) {
  Options o;
  if (args.empty()) throw UsageError("missing command");
  if (args[0] == "-h" || args[0] == "--help") {
    if (args.size() > 1) throw UsageError("unexpected argument '" + args[1] + "'");
    return std::nullopt;
  }
  if (args[0] != "info") throw UsageError("unknown command '" + args[0] + "'");

  size_t i = 1;
  if (i < args.size() && args[i] == "watch") {
    o.mode = Mode::kWatch;
    ++i;
  }
  bool interval_given = false;
  auto value = [&](const std::string& flag) -> const std::string& {
    if (i + 1 >= args.size()) throw UsageError(flag + " needs a value");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto set_mode = [&](Mode m) {
      if (o.mode != Mode::kTable) throw UsageError("'" + a + "' cannot be combined with the other options");
      o.mode = m;
    };
    if (a == "-h" || a == "--help") {
      return std::nullopt;
    } else if (a == "--json") {
      set_mode(Mode::kJson);
    } else if (a == "-l") {
      set_mode(Mode::kList);
    } else if (a == "-m") {
      set_mode(Mode::kMapping);
    } else if (a == "-t") {
      set_mode(Mode::kDetail);
      static const std::map<std::string, npu_smi::Detail> kTypes = {
          {"board", npu_smi::Detail::kBoard},   {"common", npu_smi::Detail::kCommon},
          {"health", npu_smi::Detail::kHealth}, {"memory", npu_smi::Detail::kMemory},
          {"power", npu_smi::Detail::kPower},   {"temp", npu_smi::Detail::kTemp},
          {"usages", npu_smi::Detail::kUsages}, {"usage", npu_smi::Detail::kUsages}};
      const std::string& type = value(a);
      auto found = kTypes.find(type);
      if (found == kTypes.end())
        throw UsageError("unknown type '" + type +
                         "' for -t: expected board, common, health, memory, power, temp or usages");
      o.detail = found->second;
    } else if (a == "-i") {
      o.device = parse_int(a, value(a));
    } else if (a == "-c") {
      if (int chip = parse_int(a, value(a)); chip != 0)
        throw UsageError("chip " + std::to_string(chip) + " does not exist: each NPU has one chip, 0");
      o.chip_given = true;
    } else if (a == "-d") {
      o.interval_s = parse_seconds(value(a));
      interval_given = true;
    } else {
      throw UsageError("unknown option '" + a + "'");
    }
  }
  if (o.mode == Mode::kDetail && !o.device) throw UsageError("-t needs -i ID");
  if (o.device && o.mode != Mode::kDetail && o.mode != Mode::kWatch)
    throw UsageError("-i applies to -t and watch only");
  if (o.chip_given && o.mode != Mode::kDetail) throw UsageError("-c applies to -t only");
  if (interval_given && o.mode != Mode::kWatch) throw UsageError("-d applies to watch only");
  return o;
}

int run(const Options& o) {
  npu_smi::Sampler sampler;
  if (o.device && *o.device >= sampler.device_count())
    throw UsageError("device " + std::to_string(*o.device) + " does not exist: there are " +
                     std::to_string(sampler.device_count()) + " (SOFTNPU_DEVICE_COUNT)");
  switch (o.mode) {
    case Mode::kTable: npu_smi::print_info(std::cout, sampler); break;
    case Mode::kJson: npu_smi::print_json(std::cout, sampler); break;
    case Mode::kList: npu_smi::print_list(std::cout, sampler); break;
    case Mode::kMapping: npu_smi::print_mapping(std::cout, sampler); break;
    case Mode::kDetail: npu_smi::print_detail(std::cout, sampler, o.detail, *o.device, o.chip_given); break;
    case Mode::kWatch: npu_smi::watch(std::cout, sampler, o.device.value_or(-1), o.interval_s); break;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::optional<Options> options = parse(std::vector<std::string>(argv + 1, argv + argc));
    if (!options) {
      std::cout << kUsage;
      return 0;
    }
    return run(*options);
  } catch (const UsageError& e) {
    std::cerr << "npu-smi: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "npu-smi: " << e.what() << "\n";
    return 1;
  }
}
