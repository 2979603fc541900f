// Events: completion, timing, re-recording, destruction while in use.
#include <thread>

#include "test_util.h"

namespace softnpu::test {
namespace {

TEST(Events, ElapsedTimeMeasuresTheWorkBetweenTwoRecords) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  snpuEvent_t start, end;
  ASSERT_SNPU(snpuEventCreate(&start, snpuEventDefault));
  ASSERT_SNPU(snpuEventCreate(&end, snpuEventDefault));
  ASSERT_SNPU(snpuEventRecord(start, s));
  ASSERT_SNPU(launch(s, "sleep 50 ms", [] {
    std::this_thread::sleep_for(50ms);
    return 0;
  }));
  ASSERT_SNPU(snpuEventRecord(end, s));
  ASSERT_SNPU(snpuEventSynchronize(end));
  EXPECT_SNPU(snpuEventQuery(start));
  float ms = 0;
  ASSERT_SNPU(snpuEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 49.0f);
  EXPECT_LT(ms, 2000.0f);
  ASSERT_SNPU(snpuEventElapsedTime(&ms, end, start));
  EXPECT_LE(ms, -49.0f);
  // The completion timestamps (us) are as far apart as elapsed time says.
  uint64_t start_us = 0, end_us = 0;
  ASSERT_SNPU(snpuEventGetTimestamp(start, &start_us));
  ASSERT_SNPU(snpuEventGetTimestamp(end, &end_us));
  EXPECT_GT(start_us, 0u);
  EXPECT_GE(end_us, start_us + 49000);
  ASSERT_SNPU(snpuEventDestroy(start));
  ASSERT_SNPU(snpuEventDestroy(end));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Events, QueryAndSynchronizeFollowTheRecordedWork) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  snpuEvent_t e;
  ASSERT_SNPU(snpuEventCreate(&e, 0));
  EXPECT_SNPU(snpuEventQuery(e)) << "a never-recorded event is complete";
  EXPECT_SNPU(snpuEventSynchronize(e));
  Gate gate;
  ASSERT_SNPU(gate.hold(s));
  ASSERT_SNPU(snpuEventRecord(e, s));
  EXPECT_EQ(snpuEventQuery(e), snpuErrorNotReady);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(20ms);
    gate.open();
  });
  EXPECT_SNPU(snpuEventSynchronize(e));
  opener.join();
  EXPECT_SNPU(snpuEventQuery(e));
  ASSERT_SNPU(snpuEventDestroy(e));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Events, ElapsedTimeRefusesUntimedUnrecordedAndUnfinishedEvents) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  snpuEvent_t timed, untimed, unrecorded;
  ASSERT_SNPU(snpuEventCreate(&timed, 0));
  ASSERT_SNPU(snpuEventCreate(&untimed, snpuEventDisableTiming));
  ASSERT_SNPU(snpuEventCreate(&unrecorded, 0));
  ASSERT_SNPU(snpuEventRecord(timed, s));
  ASSERT_SNPU(snpuEventRecord(untimed, s));
  ASSERT_SNPU(snpuStreamSynchronize(s));
  float ms;
  EXPECT_EQ(snpuEventElapsedTime(&ms, timed, untimed), snpuErrorInvalidHandle);
  EXPECT_NE(last_message().find("snpuEventDisableTiming"), std::string::npos) << last_message();
  EXPECT_EQ(snpuEventElapsedTime(&ms, unrecorded, timed), snpuErrorInvalidHandle);
  EXPECT_NE(last_message().find("never recorded"), std::string::npos) << last_message();
  uint64_t us;
  EXPECT_EQ(snpuEventGetTimestamp(untimed, &us), snpuErrorInvalidHandle);
  EXPECT_EQ(snpuEventGetTimestamp(unrecorded, &us), snpuErrorInvalidHandle);

  Gate gate;
  snpuEvent_t pending;
  ASSERT_SNPU(snpuEventCreate(&pending, 0));
  ASSERT_SNPU(gate.hold(s));
  ASSERT_SNPU(snpuEventRecord(pending, s));
  EXPECT_EQ(snpuEventElapsedTime(&ms, timed, pending), snpuErrorNotReady);
  EXPECT_EQ(snpuEventGetTimestamp(pending, &us), snpuErrorNotReady);
  gate.open();
  ASSERT_SNPU(snpuEventSynchronize(pending));
  EXPECT_SNPU(snpuEventElapsedTime(&ms, timed, pending));
  EXPECT_GE(ms, 0.0f);
  for (snpuEvent_t e : {timed, untimed, unrecorded, pending}) ASSERT_SNPU(snpuEventDestroy(e));
  ASSERT_SNPU(snpuStreamDestroy(s));
}

TEST(Events, RecordingAgainReplacesTheCapture) {
  ScopedEnv env({{"SOFTNPU_CORES", "2"}});  // one core for the gate, one for the idle stream
  snpuStream_t held, idle;
  ASSERT_SNPU(snpuStreamCreate(&held, 0));
  ASSERT_SNPU(snpuStreamCreate(&idle, 0));
  snpuEvent_t e;
  ASSERT_SNPU(snpuEventCreate(&e, 0));
  Gate gate;
  ASSERT_SNPU(gate.hold(held));
  ASSERT_SNPU(snpuEventRecord(e, held));
  EXPECT_EQ(snpuEventQuery(e), snpuErrorNotReady);
  ASSERT_SNPU(snpuEventRecord(e, idle));
  ASSERT_SNPU(snpuEventSynchronize(e));  // waits for the idle stream only
  EXPECT_EQ(snpuStreamQuery(held), snpuErrorNotReady);
  std::this_thread::sleep_for(30ms);
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(held));
  // The superseded marker ran 30 ms after the new one: the timestamp must stay the new record's.
  snpuEvent_t later;
  ASSERT_SNPU(snpuEventCreate(&later, 0));
  ASSERT_SNPU(snpuEventRecord(later, held));
  ASSERT_SNPU(snpuEventSynchronize(later));
  float ms;
  ASSERT_SNPU(snpuEventElapsedTime(&ms, e, later));
  EXPECT_GE(ms, 29.0f);
  ASSERT_SNPU(snpuEventDestroy(e));
  ASSERT_SNPU(snpuEventDestroy(later));
  ASSERT_SNPU(snpuStreamDestroy(held));
  ASSERT_SNPU(snpuStreamDestroy(idle));
}

TEST(Events, DestroyingAnEventDoesNotAffectWorkWaitingOnIt) {
  snpuStream_t producer, consumer;
  ASSERT_SNPU(snpuStreamCreate(&producer, 0));
  ASSERT_SNPU(snpuStreamCreate(&consumer, 0));
  snpuEvent_t e;
  ASSERT_SNPU(snpuEventCreate(&e, 0));
  Gate gate;
  std::atomic<bool> produced{false}, consumed_after{false};
  ASSERT_SNPU(gate.hold(producer));
  ASSERT_SNPU(launch(producer, "produce", [&produced] {
    produced = true;
    return 0;
  }));
  ASSERT_SNPU(snpuEventRecord(e, producer));
  ASSERT_SNPU(snpuStreamWaitEvent(consumer, e));
  ASSERT_SNPU(snpuEventDestroy(e));  // its marker has not run yet
  EXPECT_EQ(snpuEventQuery(e), snpuErrorInvalidHandle);
  ASSERT_SNPU(launch(consumer, "consume", [&] {
    consumed_after = produced.load();
    return 0;
  }));
  gate.open();
  ASSERT_SNPU(snpuStreamSynchronize(consumer));
  EXPECT_TRUE(consumed_after);
  ASSERT_SNPU(snpuStreamDestroy(producer));
  ASSERT_SNPU(snpuStreamDestroy(consumer));
}

TEST(Events, AnEventOutlivesTheStreamItWasRecordedOn) {
  snpuStream_t s;
  ASSERT_SNPU(snpuStreamCreate(&s, 0));
  snpuEvent_t e;
  ASSERT_SNPU(snpuEventCreate(&e, 0));
  ASSERT_SNPU(snpuEventRecord(e, s));
  ASSERT_SNPU(snpuStreamDestroy(s));
  EXPECT_SNPU(snpuEventQuery(e));
  EXPECT_SNPU(snpuEventSynchronize(e));
  snpuStream_t other;
  ASSERT_SNPU(snpuStreamCreate(&other, 0));
  ASSERT_SNPU(snpuStreamWaitEvent(other, e));
  ASSERT_SNPU(snpuStreamSynchronize(other));
  ASSERT_SNPU(snpuEventDestroy(e));
  ASSERT_SNPU(snpuStreamDestroy(other));
}

TEST(Events, CreateRejectsUnknownFlags) {
  snpuEvent_t e;
  EXPECT_EQ(snpuEventCreate(&e, 4), snpuErrorInvalidValue);
  EXPECT_NE(last_message().find("flags"), std::string::npos) << last_message();
}

}  // namespace
}  // namespace softnpu::test
