// Stream capture and graphs: recorded work does not run during capture; a launch runs all of it as one task, in
// stream order, as often as launched; illegal calls refuse and invalidate; recorded args live as long as the graph.
#include <cstring>

#include "test_util.h"

namespace softnpu::test {
namespace {

struct Capturing : ::testing::Test {
  void SetUp() override { ASSERT_SNPU(snpuStreamCreate(&s, 0)); }
  void TearDown() override { EXPECT_SNPU(snpuStreamDestroy(s)); }
  snpuStream_t s = nullptr;
};

TEST_F(Capturing, RecordsInsteadOfRunningAndReplaysInOrder) {
  int* buf;
  ASSERT_SNPU(snpuMallocHost(reinterpret_cast<void**>(&buf), 4 * sizeof(int)));
  std::memset(buf, 0, 4 * sizeof(int));
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 4 * sizeof(int)));
  std::atomic<int> runs{0};
  std::vector<int> order;

  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  snpuStreamCaptureStatus status;
  ASSERT_SNPU(snpuStreamIsCapturing(s, &status));
  EXPECT_EQ(status, snpuStreamCaptureStatusActive);
  ASSERT_SNPU(launch(s, "first", [&] { order.push_back(1); ++runs; return 0; }));
  ASSERT_SNPU(snpuMemsetAsync(dev, 0x01, 4 * sizeof(int), s));
  ASSERT_SNPU(snpuMemcpyAsync(buf, dev, 4 * sizeof(int), snpuMemcpyDeviceToHost, s));
  ASSERT_SNPU(launch(s, "second", [&] { order.push_back(buf[0]); ++runs; return 0; }));
  snpuGraph_t g;
  ASSERT_SNPU(snpuStreamEndCapture(s, &g));
  ASSERT_SNPU(snpuStreamIsCapturing(s, &status));
  EXPECT_EQ(status, snpuStreamCaptureStatusNone);
  size_t nodes = 0;
  ASSERT_SNPU(snpuGraphGetNodeCount(g, &nodes));
  EXPECT_EQ(nodes, 4u);
  std::vector<std::string> names;
  for (size_t i = 0; i < nodes; ++i) {
    const char* name = nullptr;
    ASSERT_SNPU(snpuGraphGetNodeName(g, i, &name));
    names.push_back(name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"first", "Memset", "Memcpy DtoH", "second"}));
  const char* past_the_end = nullptr;
  EXPECT_EQ(snpuGraphGetNodeName(g, nodes, &past_the_end), snpuErrorInvalidValue);
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(runs.load(), 0);  // captured, not run
  EXPECT_EQ(buf[0], 0);

  snpuDeviceStats before, after;
  ASSERT_SNPU(snpuGetDeviceStats(0, &before));
  for (int i = 0; i < 3; ++i) ASSERT_SNPU(snpuGraphLaunch(g, s));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  ASSERT_SNPU(snpuGetDeviceStats(0, &after));
  EXPECT_EQ(after.kernels_launched - before.kernels_launched, 3u);  // one task per launch
  EXPECT_EQ(runs.load(), 6);
  EXPECT_EQ(order, (std::vector<int>{1, 0x01010101, 1, 0x01010101, 1, 0x01010101}));
  EXPECT_SNPU(snpuGraphDestroy(g));
  EXPECT_SNPU(snpuFree(dev));
  EXPECT_SNPU(snpuFreeHost(buf));
}

TEST_F(Capturing, ReplayIsOrderedWithTheStreamAndAsynchronous) {
  std::vector<int> order;
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  ASSERT_SNPU(launch(s, "captured", [&] { order.push_back(2); return 0; }));
  snpuGraph_t g;
  ASSERT_SNPU(snpuStreamEndCapture(s, &g));
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  ASSERT_SNPU(launch(s, "before", [&] { order.push_back(1); return 0; }));
  ASSERT_SNPU(snpuGraphLaunch(g, s));
  ASSERT_SNPU(launch(s, "after", [&] { order.push_back(3); return 0; }));
  EXPECT_EQ(snpuStreamQuery(s), snpuErrorNotReady);  // the host is back while the stream is held
  EXPECT_TRUE(order.empty());
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_SNPU(snpuGraphDestroy(g));
}

TEST_F(Capturing, RecordedArgumentsLiveAsLongAsTheGraphAndItsLaunches) {
  std::atomic<int> cleanups{0};
  std::atomic<int> runs{0};
  struct Arg {
    std::atomic<int>* runs;
    std::atomic<int>* cleanups;
  };
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  ASSERT_SNPU(snpuLaunchKernel(
      s, "counted",
      [](void* a) {
        static_cast<Arg*>(a)->runs->fetch_add(1);
        return 0;
      },
      new Arg{&runs, &cleanups},
      [](void* a) {
        static_cast<Arg*>(a)->cleanups->fetch_add(1);
        delete static_cast<Arg*>(a);
      }));
  snpuGraph_t g;
  ASSERT_SNPU(snpuStreamEndCapture(s, &g));
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  ASSERT_SNPU(snpuGraphLaunch(g, s));
  ASSERT_SNPU(snpuGraphLaunch(g, s));
  ASSERT_SNPU(snpuGraphDestroy(g));  // launches pending: the graph stays until they ran
  EXPECT_EQ(cleanups.load(), 0);
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(cleanups.load(), 1);
}

TEST_F(Capturing, NodeFailureIsTheStreamsKernelError) {
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  ASSERT_SNPU(launch(s, "bad", [] {
    snpuKernelSetErrorMessage("node went wrong");
    return 5;
  }));
  snpuGraph_t g;
  ASSERT_SNPU(snpuStreamEndCapture(s, &g));
  ASSERT_SNPU(snpuGraphLaunch(g, s));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorKernelFailed);
  const char* message;
  int code;
  ASSERT_SNPU(snpuGetLastKernelError(nullptr, &message, &code, nullptr, nullptr));
  EXPECT_STREQ(message, "node went wrong");
  EXPECT_EQ(code, 5);
  EXPECT_SNPU(snpuGraphDestroy(g));
}

// Each illegal call fails with snpuErrorStreamCaptureUnsupported and invalidates the capture: later launches fail,
// end-capture yields no graph, and the stream is usable again afterwards.
void expect_invalidated(snpuStream_t s) {
  snpuStreamCaptureStatus status;
  ASSERT_SNPU(snpuStreamIsCapturing(s, &status));
  EXPECT_EQ(status, snpuStreamCaptureStatusInvalidated);
  std::atomic<int> runs{0};
  EXPECT_EQ(launch(s, "late", [&] { return ++runs, 0; }), snpuErrorStreamCaptureInvalidated);
  snpuGraph_t g = reinterpret_cast<snpuGraph_t>(1);
  EXPECT_EQ(snpuStreamEndCapture(s, &g), snpuErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  ASSERT_SNPU(launch(s, "after", [&] { return ++runs, 0; }));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(runs.load(), 1);
}

TEST_F(Capturing, StreamSynchronizeIsRefused) {
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  EXPECT_EQ(snpuStreamSynchronize(s), snpuErrorStreamCaptureUnsupported);
  EXPECT_NE(std::string(snpuGetLastErrorMessage()).find("operation not permitted when stream is capturing"),
            std::string::npos);
  expect_invalidated(s);
}

TEST_F(Capturing, StreamQueryIsRefused) {
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  EXPECT_EQ(snpuStreamQuery(s), snpuErrorStreamCaptureUnsupported);
  expect_invalidated(s);
}

TEST_F(Capturing, DeviceSynchronizeFromAnyThreadIsRefusedInGlobalMode) {
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  snpuError_t other = snpuSuccess;
  std::thread([&] { other = snpuDeviceSynchronize(); }).join();
  EXPECT_EQ(other, snpuErrorStreamCaptureUnsupported);
  expect_invalidated(s);
}

TEST_F(Capturing, ThreadLocalModeRefusesOnlyTheCapturingThread) {
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeThreadLocal));
  snpuError_t other = snpuErrorInternal;
  std::thread([&] { other = snpuDeviceSynchronize(); }).join();
  EXPECT_EQ(other, snpuSuccess);
  EXPECT_EQ(snpuDeviceSynchronize(), snpuErrorStreamCaptureUnsupported);
  expect_invalidated(s);
}

TEST_F(Capturing, RelaxedModeAllowsDeviceWideCalls) {
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeRelaxed));
  EXPECT_SNPU(snpuDeviceSynchronize());
  snpuGraph_t g;
  ASSERT_SNPU(snpuStreamEndCapture(s, &g));
  EXPECT_SNPU(snpuGraphDestroy(g));
}

TEST_F(Capturing, SynchronousCopyAndFreeAreRefused) {
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 64));
  int host[16] = {};
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  EXPECT_EQ(snpuMemcpy(host, dev, sizeof(host), snpuMemcpyDeviceToHost), snpuErrorStreamCaptureUnsupported);
  EXPECT_EQ(snpuFree(dev), snpuErrorStreamCaptureUnsupported);
  expect_invalidated(s);
  EXPECT_SNPU(snpuFree(dev));
}

TEST_F(Capturing, PageableCopyAndOutsideEventsAreRefused) {
  void* dev;
  ASSERT_SNPU(snpuMalloc(&dev, 64));
  int host[16] = {};
  for (int which = 0; which < 2; ++which) {
    snpuEvent_t e;
    ASSERT_SNPU(snpuEventCreate(&e, 0));
    ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
    snpuError_t err = which == 0 ? snpuMemcpyAsync(dev, host, sizeof(host), snpuMemcpyHostToDevice, s)
                                 : snpuStreamWaitEvent(s, e);  // an event not recorded in the capture
    EXPECT_EQ(err, snpuErrorStreamCaptureUnsupported) << which;
    expect_invalidated(s);
    EXPECT_SNPU(snpuEventDestroy(e));
  }
  EXPECT_SNPU(snpuFree(dev));
}

TEST_F(Capturing, ForkJoinRecordsTheSideStreamIntoTheGraph) {
  snpuStream_t side;
  ASSERT_SNPU(snpuStreamCreate(&side, 0));
  snpuEvent_t fork, join;
  ASSERT_SNPU(snpuEventCreate(&fork, snpuEventDisableTiming));
  ASSERT_SNPU(snpuEventCreate(&join, snpuEventDisableTiming));
  std::vector<int> order;
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  ASSERT_SNPU(launch(s, "before", [&] { order.push_back(1); return 0; }));
  ASSERT_SNPU(snpuEventRecord(fork, s));
  ASSERT_SNPU(snpuStreamWaitEvent(side, fork));  // side joins the capture
  uint64_t id_main = 0, id_side = 0;
  snpuStreamCaptureStatus status;
  ASSERT_SNPU(snpuStreamGetCaptureInfo(s, nullptr, &id_main));
  ASSERT_SNPU(snpuStreamGetCaptureInfo(side, &status, &id_side));
  EXPECT_EQ(status, snpuStreamCaptureStatusActive);
  EXPECT_NE(id_main, 0u);
  EXPECT_EQ(id_main, id_side);
  ASSERT_SNPU(launch(side, "branch", [&] { order.push_back(2); return 0; }));
  ASSERT_SNPU(snpuEventRecord(join, side));
  ASSERT_SNPU(snpuStreamWaitEvent(s, join));
  ASSERT_SNPU(launch(s, "after", [&] { order.push_back(3); return 0; }));
  snpuGraph_t g;
  EXPECT_EQ(snpuStreamEndCapture(side, &g), snpuErrorInvalidValue);  // only the stream that began it ends it
  ASSERT_SNPU(snpuStreamEndCapture(s, &g));
  ASSERT_SNPU(snpuStreamGetCaptureInfo(side, &status, &id_side));
  EXPECT_EQ(status, snpuStreamCaptureStatusNone);
  EXPECT_EQ(id_side, 0u);
  EXPECT_TRUE(order.empty());
  for (int i = 0; i < 2; ++i) ASSERT_SNPU(snpuGraphLaunch(g, s));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 1, 2, 3}));
  // The side stream runs its own work again once the capture ended.
  ASSERT_SNPU(launch(side, "eager", [&] { order.push_back(4); return 0; }));
  ASSERT_SNPU(snpuStreamSynchronize(side));
  EXPECT_EQ(order.back(), 4);
  EXPECT_SNPU(snpuGraphDestroy(g));
  EXPECT_SNPU(snpuEventDestroy(fork));
  EXPECT_SNPU(snpuEventDestroy(join));
  EXPECT_SNPU(snpuStreamDestroy(side));
}

TEST_F(Capturing, IfNodesRunTheirWorkOnlyWhenThePredicateHolds) {
  uint8_t* pred;  // [outer, inner]
  ASSERT_SNPU(snpuMalloc(reinterpret_cast<void**>(&pred), 2));
  std::vector<int> order;
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  ASSERT_SNPU(launch(s, "before", [&] { order.push_back(1); return 0; }));
  ASSERT_SNPU(snpuStreamBeginCaptureToIfNode(s, pred));
  ASSERT_SNPU(snpuStreamBeginCaptureToIfNode(s, pred + 1));
  ASSERT_SNPU(launch(s, "inner", [&] { order.push_back(3); return 0; }));
  ASSERT_SNPU(snpuStreamEndCaptureToConditionalNode(s));
  ASSERT_SNPU(launch(s, "outer", [&] { order.push_back(2); return 0; }));
  ASSERT_SNPU(snpuStreamEndCaptureToConditionalNode(s));
  EXPECT_EQ(snpuStreamEndCaptureToConditionalNode(s), snpuErrorInvalidValue);  // none open
  ASSERT_SNPU(launch(s, "after", [&] { order.push_back(4); return 0; }));
  snpuGraph_t g;
  ASSERT_SNPU(snpuStreamEndCapture(s, &g));
  const std::vector<std::pair<uint8_t, uint8_t>> cases = {{1, 1}, {1, 0}, {0, 1}, {0, 0}};
  const std::vector<std::vector<int>> expected = {{1, 3, 2, 4}, {1, 2, 4}, {1, 4}, {1, 4}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const uint8_t host[2] = {cases[i].first, cases[i].second};
    ASSERT_SNPU(snpuMemcpyAsync(pred, host, 2, snpuMemcpyHostToDevice, s));
    order.clear();
    ASSERT_SNPU(snpuGraphLaunch(g, s));
    ASSERT_SNPU(snpuStreamSynchronize(s));
    EXPECT_EQ(order, expected[i]) << i;
  }
  EXPECT_SNPU(snpuGraphDestroy(g));
  // A capture cannot end inside a conditional node.
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  ASSERT_SNPU(snpuStreamBeginCaptureToIfNode(s, pred));
  EXPECT_EQ(snpuStreamEndCapture(s, &g), snpuErrorInvalidValue);
  EXPECT_EQ(g, nullptr);
  EXPECT_SNPU(snpuFree(pred));
}

TEST_F(Capturing, BadCalls) {
  snpuStream_t def;
  ASSERT_SNPU(snpuGetDefaultStream(0, &def));
  EXPECT_EQ(snpuStreamBeginCapture(def, snpuStreamCaptureModeGlobal), snpuErrorInvalidValue);
  snpuGraph_t g;
  EXPECT_EQ(snpuStreamEndCapture(s, &g), snpuErrorInvalidValue);  // not capturing
  ASSERT_SNPU(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal));
  EXPECT_EQ(snpuStreamBeginCapture(s, snpuStreamCaptureModeGlobal), snpuErrorInvalidValue);
  ASSERT_SNPU(snpuStreamEndCapture(s, &g));
  EXPECT_SNPU(snpuGraphDestroy(g));
}

}  // namespace
}  // namespace softnpu::test
