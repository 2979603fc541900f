// The statistics every process publishes (published_stats), the management API that reads them, and npu-smi, seen
// from outside: other processes (stats_holder) use the runtime while this one observes them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <new>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "../src/published_stats.h"
#include "mini_json.h"
#include "softnpu/management.h"
#include "subprocess.h"

namespace softnpu::test {
namespace {

namespace stats = softnpu::rt::stats;

const std::string kHolder = STATS_HOLDER_PATH;
const std::string kNpuSmi = NPU_SMI_PATH;
constexpr uint64_t kHeld = uint64_t(256) << 20;  // what stats_holder holds on device 0

std::string segment_path(pid_t pid) { return "/dev/shm/" + stats::segment_name(geteuid(), pid); }

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::vector<snpuMgmtProcessUsage> list_usage() {
  size_t count = 0;
  EXPECT_EQ(snpuMgmtListProcessUsage(nullptr, 0, &count), snpuSuccess);
  std::vector<snpuMgmtProcessUsage> usage(count + 16);
  EXPECT_EQ(snpuMgmtListProcessUsage(usage.data(), usage.size(), &count), snpuSuccess);
  usage.resize(std::min(count, usage.size()));
  return usage;
}

std::optional<snpuMgmtProcessUsage> usage_of(pid_t pid, int device) {
  for (const snpuMgmtProcessUsage& u : list_usage())
    if (u.pid == pid && u.device == device) return u;
  return std::nullopt;
}

// stats_holder, once it holds its memory.
class Holder : public Child {
 public:
  explicit Holder(const std::vector<std::string>& args = {}, const std::vector<std::string>& env = {})
      : Child(with_program(args), env) {
    std::optional<std::string> line = read_line();
    if (line != "ready") throw std::runtime_error("stats_holder did not get ready: " + line.value_or("<no output>"));
  }

 private:
  static std::vector<std::string> with_program(std::vector<std::string> args) {
    args.insert(args.begin(), kHolder);
    return args;
  }
};

// Sets an environment variable for the scope of a test (the management API reads the environment on every call).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// ---------------------------------------------------------------- publisher and reader

TEST(PublishedStats, LiveProcessIsListedWithItsMemoryAndName) {
  Holder holder;
  std::optional<snpuMgmtProcessUsage> u = usage_of(holder.pid(), 0);
  ASSERT_TRUE(u) << "stats_holder (pid " << holder.pid() << ") is not listed";
  EXPECT_STREQ(u->process_name, "stats_holder");
  EXPECT_EQ(u->memory_in_use, kHeld);
  EXPECT_GE(u->memory_peak, kHeld);
  EXPECT_GE(u->kernels_launched, 4u);
  EXPECT_GT(u->compute_threads, 0);
  EXPECT_GT(u->sample_ns, 0);
  // Only the devices a process used are listed.
  EXPECT_FALSE(usage_of(holder.pid(), 1));
}

TEST(PublishedStats, SegmentIsReadableOnlyByItsOwnerWhateverTheUmask) {
  mode_t old = umask(0277);  // would leave 0400 without the publisher's fchmod
  std::optional<Holder> holder;
  try {
    holder.emplace();
  } catch (...) {
    umask(old);
    throw;
  }
  umask(old);
  struct stat st;
  ASSERT_EQ(stat(segment_path(holder->pid()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST(PublishedStats, KilledProcessIsSkippedAndItsSegmentRemoved) {
  Holder holder;
  pid_t pid = holder.pid();
  ASSERT_TRUE(exists(segment_path(pid)));
  holder.signal(SIGKILL);
  holder.wait();  // a zombie still exists: only a reaped process is dead
  EXPECT_FALSE(usage_of(pid, 0));
  EXPECT_FALSE(exists(segment_path(pid)));
}

TEST(PublishedStats, ProcessThatExitsRemovesItsOwnSegment) {
  Holder holder;
  pid_t pid = holder.pid();
  ASSERT_TRUE(exists(segment_path(pid)));
  holder.close_stdin();
  int status = holder.wait();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_FALSE(exists(segment_path(pid)));
}

// Writes a segment by hand for pid, as a publisher with that start time would have.
void fabricate_segment(pid_t pid, uint64_t start_ticks) {
  std::string name = "/" + stats::segment_name(geteuid(), pid);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, sizeof(stats::Segment)), 0);
  void* p = mmap(nullptr, sizeof(stats::Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(p, MAP_FAILED);
  auto* s = new (p) stats::Segment();
  s->magic = stats::kMagic;
  s->version = stats::kVersion;
  s->pid = pid;
  s->start_ticks = start_ticks;
  std::snprintf(s->process_name, sizeof(s->process_name), "fabricated");
  s->devices[0].memory_in_use = 1 << 20;
  s->devices[0].touched = 1;
  s->ready = 1;
  munmap(p, sizeof(stats::Segment));
}

TEST(PublishedStats, ReusedPidIsTreatedAsDead) {
  // A live process that never used the runtime stands for a new process that was given a dead publisher's pid.
  Child sleeper({"/bin/sleep", "60"});
  pid_t pid = sleeper.pid();
  uint64_t start = stats::process_start_ticks(pid);
  ASSERT_GT(start, 0u);

  // The same start time: the publisher itself, so the segment is read.
  fabricate_segment(pid, start);
  std::optional<snpuMgmtProcessUsage> u = usage_of(pid, 0);
  ASSERT_TRUE(u);
  EXPECT_STREQ(u->process_name, "fabricated");

  // Another start time: the pid was reused, so the segment is stale.
  fabricate_segment(pid, start + 1);
  EXPECT_FALSE(usage_of(pid, 0));
  EXPECT_FALSE(exists(segment_path(pid)));
}

TEST(PublishedStats, ShutdownRemovesThisProcessSegmentAndTheNextUsePublishesAgain) {
  void* p = nullptr;
  ASSERT_EQ(snpuMalloc(&p, 1 << 20), snpuSuccess);
  std::optional<snpuMgmtProcessUsage> u = usage_of(getpid(), 0);  // a reader lists its own process too
  ASSERT_TRUE(u);
  EXPECT_EQ(u->memory_in_use, uint64_t(1) << 20);

  ASSERT_EQ(snpuShutdown(), snpuSuccess);
  EXPECT_FALSE(exists(segment_path(getpid())));
  EXPECT_FALSE(usage_of(getpid(), 0));

  ASSERT_EQ(snpuMalloc(&p, 2 << 20), snpuSuccess);
  u = usage_of(getpid(), 0);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->memory_in_use, uint64_t(2) << 20);  // counters start afresh
  ASSERT_EQ(snpuShutdown(), snpuSuccess);
}

TEST(PublishedStats, MemoryAccountingKeepsThePeak) {
  stats::DeviceCounters c;
  stats::add_memory(&c, 100);
  stats::add_memory(&c, 50);
  stats::add_memory(&c, -120);
  stats::add_memory(&c, 10);
  EXPECT_EQ(c.memory_in_use.load(), 40u);
  EXPECT_EQ(c.memory_peak.load(), 150u);
}

// ---------------------------------------------------------------- management API

TEST(Management, DevicesFollowTheConfigurationAndIgnoreVisibleDevices) {
  int count = 0;
  ASSERT_EQ(snpuMgmtGetDeviceCount(&count), snpuSuccess);
  EXPECT_EQ(count, 2);
  {
    ScopedEnv devices("SOFTNPU_DEVICE_COUNT", "4");
    ScopedEnv visible("ASCEND_RT_VISIBLE_DEVICES", "3");
    ScopedEnv memory("SOFTNPU_MEMORY_MB", "1024");
    ScopedEnv cores("SOFTNPU_CORES", "3");
    ASSERT_EQ(snpuMgmtGetDeviceCount(&count), snpuSuccess);
    EXPECT_EQ(count, 4);
    snpuDeviceProp prop;
    ASSERT_EQ(snpuMgmtGetDeviceProperties(&prop, 2), snpuSuccess);
    EXPECT_STREQ(prop.name, "Ascend910B3");
    EXPECT_STREQ(prop.chip_name, "910B3");
    EXPECT_EQ(prop.total_memory, size_t(1024) << 20);
    EXPECT_EQ(prop.compute_threads, 3);
    EXPECT_EQ(prop.ai_cores, 20);
    EXPECT_EQ(prop.physical_index, 2);
    EXPECT_EQ(snpuMgmtGetDeviceProperties(&prop, 4), snpuErrorInvalidDevice);
    EXPECT_EQ(snpuMgmtGetDeviceProperties(&prop, -1), snpuErrorInvalidDevice);
  }
}

TEST(Management, MalformedEnvironmentIsAnInvalidConfigNamingTheVariable) {
  ScopedEnv devices("SOFTNPU_DEVICE_COUNT", "two");
  int count = 0;
  EXPECT_EQ(snpuMgmtGetDeviceCount(&count), snpuErrorInvalidConfig);
  EXPECT_NE(std::string(snpuGetLastErrorMessage()).find("SOFTNPU_DEVICE_COUNT='two'"), std::string::npos)
      << snpuGetLastErrorMessage();
}

TEST(Management, ListRejectsNullArguments) {
  snpuMgmtProcessUsage one;
  size_t count = 0;
  EXPECT_EQ(snpuMgmtListProcessUsage(&one, 1, nullptr), snpuErrorInvalidValue);
  EXPECT_EQ(snpuMgmtListProcessUsage(nullptr, 1, &count), snpuErrorInvalidValue);
}

// ---------------------------------------------------------------- npu-smi

TEST(NpuSmi, HelpAndUsageErrors) {
  for (const char* help : {"-h", "--help"}) {
    Result r = run({kNpuSmi, help});
    EXPECT_EQ(r.exit_code, 0) << help;
    EXPECT_NE(r.out.find("Usage: npu-smi"), std::string::npos) << help;
  }
  const std::vector<std::vector<std::string>> usage_errors = {
      {},
      {"frobnicate"},
      {"info", "--bogus"},
      {"info", "-t", "usage"},              // missing -i
      {"info", "-t", "usage", "-i", "7"},   // no such device
      {"info", "-t", "usage", "-i", "x"},
      {"info", "-t", "sensors", "-i", "0"},
      {"info", "-t"},
      {"info", "-l", "--json"},
      {"info", "-i", "0"},
      {"info", "watch", "-i", "2"},
      {"info", "watch", "-d", "0"},
      {"info", "-t", "board", "-i", "0", "-c", "1"},
      {"info", "-m", "-i", "0"},
      {"info", "-l", "-c", "0"},
  };
  for (std::vector<std::string> args : usage_errors) {
    std::string shown;
    for (const std::string& a : args) shown += " " + a;
    args.insert(args.begin(), kNpuSmi);
    Result r = run(args);
    EXPECT_EQ(r.exit_code, 2) << "npu-smi" << shown;
    EXPECT_NE(r.err.find("Usage: npu-smi"), std::string::npos) << "npu-smi" << shown;
    EXPECT_TRUE(r.out.empty()) << "npu-smi" << shown;
  }
}

TEST(NpuSmi, MalformedEnvironmentFailsWithTheMessage) {
  Result r = run({kNpuSmi, "info"}, {"SOFTNPU_DEVICE_COUNT=0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("SOFTNPU_DEVICE_COUNT='0'"), std::string::npos) << r.err;
}

// A "Key : Value" line as Ascend's npu-smi prints it: a tab, the key in 30 columns.
std::string field(const std::string& key, const std::string& value) {
  return "\t" + key + std::string(30 - key.size(), ' ') + " : " + value + "\n";
}

TEST(NpuSmi, ListCountsTheConfiguredDevices) {
  Result r = run({kNpuSmi, "info", "-l"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(field("Total Count", "2"), 0), 0u) << r.out;
  EXPECT_NE(r.out.find(field("NPU ID", "1")), std::string::npos) << r.out;

  r = run({kNpuSmi, "info", "-l"}, {"SOFTNPU_DEVICE_COUNT=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(field("Total Count", "4"), 0), 0u) << r.out;
  EXPECT_NE(r.out.find(field("NPU ID", "3")), std::string::npos) << r.out;
}

TEST(NpuSmi, MappingListsOneChipPerNpu) {
  Result r = run({kNpuSmi, "info", "-m"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto column = [](const std::string& s) { return s + std::string(31 - s.size(), ' '); };
  EXPECT_EQ(r.out, "\t" + column("NPU ID") + column("Chip ID") + column("Chip Logic ID") + "Chip Name" +
                       std::string(21, ' ') + "\n" +
                       "\t" + column("0") + column("0") + column("0") + "Ascend 910B3\n" +
                       "\t" + column("1") + column("0") + column("1") + "Ascend 910B3\n");
}

TEST(NpuSmi, DetailsOfADevice) {
  Holder holder;
  for (const char* type : {"board", "common", "health", "memory", "power", "temp", "usages", "usage"}) {
    for (bool chip : {false, true}) {
      std::vector<std::string> args = {kNpuSmi, "info", "-t", type, "-i", "0"};
      if (chip) args.insert(args.end(), {"-c", "0"});
      Result r = run(args);
      EXPECT_EQ(r.exit_code, 0) << type << ": " << r.err;
      EXPECT_EQ(r.out.rfind(field("NPU ID", "0"), 0), 0u) << type << ":\n" << r.out;
      if (chip) {
        EXPECT_EQ(r.out.find(field("Chip ID", "0")), field("NPU ID", "0").size()) << type << ":\n" << r.out;
      }
    }
  }
  Result r = run({kNpuSmi, "info", "-t", "usages", "-i", "0"}, {"SOFTNPU_MEMORY_MB=1024"});
  EXPECT_NE(r.out.find(field("HBM Capacity(MB)", "1024")), std::string::npos) << r.out;
  std::smatch rate;  // at least the holder's 256 of 1024 MiB
  ASSERT_TRUE(std::regex_search(r.out, rate, std::regex("\tHBM Usage Rate\\(%\\) +: (\\d+)\n"))) << r.out;
  EXPECT_GE(std::stoi(rate[1]), 25) << r.out;
  EXPECT_NE(r.out.find("\tAicore Usage Rate(%)           : "), std::string::npos) << r.out;
  r = run({kNpuSmi, "info", "-t", "memory", "-i", "0"}, {"SOFTNPU_MEMORY_MB=1048576"});
  EXPECT_NE(r.out.find(field("HBM Capacity(MB)", "1048576")), std::string::npos) << r.out;
  // Ascend names the card's power and a chip's differently; both simulated, 65 W when idle (device 63: idle).
  const std::vector<std::string> idle = {"SOFTNPU_DEVICE_COUNT=64"};
  r = run({kNpuSmi, "info", "-t", "power", "-i", "63"}, idle);
  EXPECT_NE(r.out.find(field("Power Dissipation(W)", "65.0")), std::string::npos) << r.out;
  r = run({kNpuSmi, "info", "-t", "power", "-i", "63", "-c", "0"}, idle);
  EXPECT_NE(r.out.find(field("NPU Real-time Power(W)", "65.0")), std::string::npos) << r.out;
  r = run({kNpuSmi, "info", "-t", "common", "-i", "1"});
  EXPECT_NE(r.out.find(field("Aicore Count", "20")), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(field("Aicore Freq(MHZ)", "1800")), std::string::npos) << r.out;
  r = run({kNpuSmi, "info", "-t", "board", "-i", "1"});
  for (const std::string& line : {field("PCIe Bus Info", "0000:C2:00.0"), field("Chip Name", "910B3"),
                                  field("NPU Name", "Ascend910B3"), field("PCI Vendor ID", "NA")})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << r.out;
  r = run({kNpuSmi, "info", "-t", "board", "-i", "1", "-c", "0"});  // the chip's board information
  for (const std::string& line : {field("Chip Type", "Ascend"), field("Chip Name", "910B3"),
                                  field("PCIe Bus Info", "0000:C2:00.0")})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << r.out;
}

TEST(NpuSmi, BusIdsAreStablePerPhysicalDevice) {
  Result r = run({kNpuSmi, "info", "--json"}, {"SOFTNPU_DEVICE_COUNT=10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> ids;
  const Json parsed = JsonReader::parse(r.out);  // named: a range-for over a temporary's member would dangle
  for (const Json& d : parsed.get("devices")->array) ids.push_back(d.get("bus_id")->string);
  EXPECT_EQ(ids, (std::vector<std::string>{"0000:C1:00.0", "0000:C2:00.0", "0000:81:00.0", "0000:82:00.0",
                                           "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0",
                                           "0001:C1:00.0", "0001:C2:00.0"}));
}

TEST(NpuSmi, TableShowsDevicesAndProcesses) {
  Holder holder;
  // 64 devices: no other test uses the last one, so its "no processes" line is certain.
  Result r = run({kNpuSmi, "info"}, {"SOFTNPU_DEVICE_COUNT=64", "SOFTNPU_MEMORY_MB=65536"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Ascend's 910B table, line for line as its npu-smi prints it.
  for (const char* line : {
           "| npu-smi 25.5.0                   Version: 25.5.0                 softnpu ",
           "+---------------------------+---------------+----------------------------------------------------+\n"
           "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n"
           "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n"
           "+===========================+===============+====================================================+\n",
           "| 63    910B3               | OK            | 65.0        36                0    / 0             |\n"
           "| 0                         | 0007:42:00.0  | 0           0    / 0          0    / 65536         |\n"
           "+===========================+===============+====================================================+\n",
           "+---------------------------+---------------+----------------------------------------------------+\n"
           "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |\n"
           "+===========================+===============+====================================================+\n",
           "| No running processes found in NPU 63                                                           |\n"
           "+===========================+===============+====================================================+\n"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_NE(r.out.find("SOFTWARE NPUs"), std::string::npos) << r.out;
  // Device 0: the holder's 256 MiB (and whatever other tests hold) of 65536 under HBM-Usage.
  std::smatch m;
  std::regex device0(R"(\| 0 {25}\| 0000:C1:00\.0  \| \d+ +0    / 0 {10}(\d+) */ 65536 +\|\n)");
  ASSERT_TRUE(std::regex_search(r.out, m, device0)) << r.out;
  EXPECT_GE(std::stoi(m[1]), 256) << r.out;
  EXPECT_NE(r.out.find("| 0       0                 | " + std::to_string(holder.pid())), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| stats_holder             | 256 "), std::string::npos) << r.out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) EXPECT_EQ(line.size(), 98u) << line;
}

// The process entries of npu-smi --json, checking the document's shape on the way.
std::vector<Json> json_processes(const std::vector<std::string>& env = {}) {
  Result r = run({kNpuSmi, "info", "--json"}, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Json doc = JsonReader::parse(r.out);
  EXPECT_EQ(doc.keys(), (std::vector<std::string>{"devices", "processes"}));
  const Json* devices = doc.get("devices");
  const Json* processes = doc.get("processes");
  if (!devices || !processes || devices->kind != Json::kArray || processes->kind != Json::kArray) {
    ADD_FAILURE() << r.out;
    return {};
  }
  for (const Json& d : devices->array) {
    EXPECT_EQ(d.keys(), (std::vector<std::string>{"id", "name", "bus_id", "memory_total_mb", "memory_used_mb",
                                                  "aicore_percent"}));
    EXPECT_EQ(d.get("name")->kind, Json::kString);
    EXPECT_EQ(d.get("bus_id")->kind, Json::kString);
    for (const char* key : {"id", "memory_total_mb", "memory_used_mb", "aicore_percent"})
      EXPECT_EQ(d.get(key)->kind, Json::kNumber) << key;
  }
  for (const Json& p : processes->array) {
    EXPECT_EQ(p.keys(), (std::vector<std::string>{"pid", "name", "device", "memory_mb"}));
    EXPECT_EQ(p.get("name")->kind, Json::kString);
    for (const char* key : {"pid", "device", "memory_mb"}) EXPECT_EQ(p.get(key)->kind, Json::kNumber) << key;
  }
  return processes->array;
}

const Json* find_process(const std::vector<Json>& processes, pid_t pid) {
  for (const Json& p : processes)
    if (p.get("pid") && p.get("pid")->number == pid) return &p;
  return nullptr;
}

TEST(NpuSmi, JsonShowsAProcessHoldingMemoryUntilItIsKilled) {
  std::optional<Holder> holder;
  holder.emplace();
  pid_t pid = holder->pid();
  std::vector<Json> processes = json_processes();
  const Json* p = find_process(processes, pid);
  ASSERT_TRUE(p) << "pid " << pid << " missing";
  EXPECT_EQ(p->get("name")->string, "stats_holder");
  EXPECT_EQ(p->get("device")->number, 0);
  EXPECT_EQ(p->get("memory_mb")->number, 256);

  holder.reset();  // SIGKILL
  EXPECT_FALSE(find_process(json_processes(), pid));
}

TEST(NpuSmi, JsonShowsDeviceMemoryAndAiCoreUtilization) {
  Holder holder({"busy"}, {"SOFTNPU_CORES=1"});
  Result r = run({kNpuSmi, "info", "--json"}, {"SOFTNPU_MEMORY_MB=4096"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json doc = JsonReader::parse(r.out);
  const Json& device0 = doc.get("devices")->array.at(0);
  EXPECT_EQ(device0.get("id")->number, 0);
  EXPECT_EQ(device0.get("name")->string, "910B3");
  EXPECT_EQ(device0.get("memory_total_mb")->number, 4096);
  EXPECT_GE(device0.get("memory_used_mb")->number, 256);
  // One compute thread running 20 ms kernels back to back: busy most of the time.
  EXPECT_GE(device0.get("aicore_percent")->number, 30) << r.out;
  EXPECT_LE(device0.get("aicore_percent")->number, 100) << r.out;
}

TEST(NpuSmi, WatchPrintsLinesUntilCtrlC) {
  Child watch({kNpuSmi, "info", "watch", "-d", "0.2"});
  std::optional<std::string> header = watch.read_line();
  ASSERT_TRUE(header);
  EXPECT_EQ(header->rfind("NpuID(Idx)", 0), 0u) << *header;
  for (int i = 0; i < 4; ++i) {  // two samples of the two devices
    std::optional<std::string> line = watch.read_line();
    ASSERT_TRUE(line);
    EXPECT_EQ(line->rfind(std::to_string(i % 2) + " ", 0), 0u) << *line;
  }
  watch.signal(SIGINT);
  int status = watch.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace softnpu::test
