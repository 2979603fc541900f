// Measures the runtime's costs: launch-to-start latency on an idle stream, launch throughput, event round trips, and
// copy bandwidth against plain memcpy of the same size in the same run. Prints a table; --json FILE also writes the
// figures as JSON.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "softnpu/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

void check(snpuError_t e, const char* call) {
  if (e == snpuSuccess) return;
  std::fprintf(stderr, "runtime_bench: %s failed: %s: %s\n", call, snpuGetErrorName(e), snpuGetLastErrorMessage());
  std::exit(1);
}
#define CHECK(call) check((call), #call)

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

struct Result {
  std::string name;
  double value;
  std::string unit;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

int empty_kernel(void*) { return 0; }

int stamp_start(void* arg) {
  static_cast<std::atomic<int64_t>*>(arg)->store(now_ns(), std::memory_order_relaxed);
  return 0;
}

// Launch-to-start latency on an idle stream, in microseconds. With pause, the compute thread has gone to sleep
// before each launch; without, it may still be spinning from the previous one.
std::vector<double> launch_latencies(snpuStream_t s, int iterations, std::chrono::microseconds pause) {
  std::vector<double> us;
  std::atomic<int64_t> started{0};
  for (int i = 0; i < iterations; ++i) {
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    int64_t t0 = now_ns();
    CHECK(snpuLaunchKernel(s, "stamp", stamp_start, &started, nullptr));
    CHECK(snpuStreamSynchronize(s));
    us.push_back(static_cast<double>(started.load(std::memory_order_relaxed) - t0) / 1e3);
  }
  return us;
}

// Seconds per transfer: the best of several, as bandwidth benchmarks report.
template <class F>
double best_seconds(int repetitions, F&& transfer) {
  double best = 1e30;
  for (int i = 0; i < repetitions; ++i) {
    int64_t t0 = now_ns();
    transfer();
    best = std::min(best, static_cast<double>(now_ns() - t0) / 1e9);
  }
  return best;
}

void write_json(const std::string& path, const std::vector<Result>& results) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "runtime_bench: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  std::fprintf(f, "{\n  \"results\": [\n");
  for (size_t i = 0; i < results.size(); ++i) {
    std::fprintf(f, "    {\"name\": \"%s\", \"value\": %.6g, \"unit\": \"%s\"}%s\n", results[i].name.c_str(),
                 results[i].value, results[i].unit.c_str(), i + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--json FILE]\n", argv[0]);
      return 2;
    }
  }

  CHECK(snpuInit());
  snpuDeviceProp prop;
  CHECK(snpuGetDeviceProperties(&prop, 0));
  snpuStream_t s;
  CHECK(snpuStreamCreate(&s, 0));
  std::vector<Result> results;

  launch_latencies(s, 200, std::chrono::microseconds(0));  // warm up: threads started, queue sized
  std::vector<double> hot = launch_latencies(s, 5000, std::chrono::microseconds(0));
  results.push_back({"launch-to-start latency, back to back (median)", median(hot), "us"});
  results.push_back({"launch-to-start latency, back to back (p99)", percentile(hot, 0.99), "us"});
  std::vector<double> cold = launch_latencies(s, 500, std::chrono::microseconds(500));
  results.push_back({"launch-to-start latency, sleeping core (median)", median(cold), "us"});
  results.push_back({"launch-to-start latency, sleeping core (p99)", percentile(cold, 0.99), "us"});

  constexpr int kLaunches = 200000;
  int64_t t0 = now_ns();
  for (int i = 0; i < kLaunches; ++i) CHECK(snpuLaunchKernel(s, "empty", empty_kernel, nullptr, nullptr));
  int64_t t1 = now_ns();
  CHECK(snpuStreamSynchronize(s));
  int64_t t2 = now_ns();
  results.push_back(
      {"empty kernels per second (launch all, one sync)", kLaunches / (static_cast<double>(t2 - t0) / 1e9), "1/s"});
  results.push_back({"host time per launch", static_cast<double>(t1 - t0) / kLaunches, "ns"});

  snpuEvent_t e;
  CHECK(snpuEventCreate(&e, snpuEventDisableTiming));
  std::vector<double> round_trips;
  for (int i = 0; i < 5000; ++i) {
    int64_t r0 = now_ns();
    CHECK(snpuEventRecord(e, s));
    CHECK(snpuEventSynchronize(e));
    round_trips.push_back(static_cast<double>(now_ns() - r0) / 1e3);
  }
  results.push_back({"event record + synchronize (median)", median(round_trips), "us"});
  results.push_back({"event record + synchronize (p99)", percentile(round_trips, 0.99), "us"});
  CHECK(snpuEventDestroy(e));

  constexpr size_t kBytes = size_t(64) << 20;
  constexpr int kReps = 7;
  void *dev, *pinned;
  CHECK(snpuMalloc(&dev, kBytes));
  CHECK(snpuMallocHost(&pinned, kBytes));
  std::vector<char> pageable(kBytes, 1), plain_dst(kBytes, 2);
  std::memset(pinned, 3, kBytes);
  const double gib = static_cast<double>(kBytes) / (1 << 30);
  double memcpy_s = best_seconds(kReps, [&] {
    std::memcpy(plain_dst.data(), pageable.data(), kBytes);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // keep the copy
  });
  results.push_back({"memcpy 64 MiB (baseline)", gib / memcpy_s, "GiB/s"});
  struct Copy {
    const char* name;
    void* dst;
    const void* src;
    snpuMemcpyKind kind;
  } copies[] = {
      {"H2D 64 MiB pinned", dev, pinned, snpuMemcpyHostToDevice},
      {"D2H 64 MiB pinned", pinned, dev, snpuMemcpyDeviceToHost},
      {"H2D 64 MiB pageable", dev, pageable.data(), snpuMemcpyHostToDevice},
      {"D2H 64 MiB pageable", pageable.data(), dev, snpuMemcpyDeviceToHost},
  };
  for (const Copy& c : copies) {
    double seconds = best_seconds(kReps, [&] {
      CHECK(snpuMemcpyAsync(c.dst, c.src, kBytes, c.kind, s));
      CHECK(snpuStreamSynchronize(s));
    });
    results.push_back({std::string(c.name), gib / seconds, "GiB/s"});
    results.push_back({std::string(c.name) + " / memcpy", memcpy_s / seconds, "ratio"});
  }
  CHECK(snpuFree(dev));
  CHECK(snpuFreeHost(pinned));
  CHECK(snpuStreamDestroy(s));

  std::printf("softnpu runtime benchmark (device 0: %d compute threads, host: %u cores)\n", prop.compute_threads,
              std::thread::hardware_concurrency());
  std::printf("%-52s %14s  %s\n", "measure", "value", "unit");
  for (const Result& r : results) std::printf("%-52s %14.3f  %s\n", r.name.c_str(), r.value, r.unit.c_str());
  if (!json_path.empty()) write_json(json_path, results);
  CHECK(snpuShutdown());
  return 0;
}
