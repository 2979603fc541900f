// Streams and events: the runtime's own, behind ACL's opaque handles. A NULL stream is the current device's default
// stream.
#include "internal.h"

using namespace softnpu::acl;

namespace {

snpuStream_t as_stream(aclrtStream s) { return static_cast<snpuStream_t>(s); }
snpuEvent_t as_event(aclrtEvent e) { return static_cast<snpuEvent_t>(e); }

}  // namespace

extern "C" {

aclError aclrtCreateStream(aclrtStream* stream) {
  ACL_REQUIRE_CONTEXT("aclrtCreateStream");
  if (!stream) return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: stream is null");
  snpuStream_t s = nullptr;
  if (auto e = snpuStreamCreate(&s, 0)) return runtime_error(e, "aclrtCreateStream");
  *stream = s;
  return ACL_SUCCESS;
}

aclError aclrtDestroyStream(aclrtStream stream) {
  ACL_REQUIRE_INIT("aclrtDestroyStream");
  if (!stream) return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream: stream is null");
  if (auto e = snpuStreamDestroy(as_stream(stream))) return runtime_error(e, "aclrtDestroyStream");
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeStream(aclrtStream stream) {
  ACL_REQUIRE_CONTEXT("aclrtSynchronizeStream");
  if (auto e = snpuStreamSynchronize(as_stream(stream))) return runtime_error(e, "aclrtSynchronizeStream");
  return ACL_SUCCESS;
}

aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus* status) {
  ACL_REQUIRE_CONTEXT("aclrtStreamQuery");
  if (!status) return fail(ACL_ERROR_INVALID_PARAM, "aclrtStreamQuery: status is null");
  auto e = snpuStreamQuery(as_stream(stream));
  if (e && e != snpuErrorNotReady) return runtime_error(e, "aclrtStreamQuery");
  *status = e ? ACL_STREAM_STATUS_NOT_READY : ACL_STREAM_STATUS_COMPLETE;
  return ACL_SUCCESS;
}

aclError aclrtCreateEvent(aclrtEvent* event) {
  ACL_REQUIRE_CONTEXT("aclrtCreateEvent");
  if (!event) return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateEvent: event is null");
  snpuEvent_t ev = nullptr;
  if (auto e = snpuEventCreate(&ev, snpuEventDefault)) return runtime_error(e, "aclrtCreateEvent");
  *event = ev;
  return ACL_SUCCESS;
}

aclError aclrtDestroyEvent(aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtDestroyEvent");
  if (!event) return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyEvent: event is null");
  if (auto e = snpuEventDestroy(as_event(event))) return runtime_error(e, "aclrtDestroyEvent");
  return ACL_SUCCESS;
}

aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  ACL_REQUIRE_CONTEXT("aclrtRecordEvent");
  if (!event) return fail(ACL_ERROR_INVALID_PARAM, "aclrtRecordEvent: event is null");
  if (auto e = snpuEventRecord(as_event(event), as_stream(stream))) return runtime_error(e, "aclrtRecordEvent");
  return ACL_SUCCESS;
}

aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
  ACL_REQUIRE_CONTEXT("aclrtStreamWaitEvent");
  if (!event) return fail(ACL_ERROR_INVALID_PARAM, "aclrtStreamWaitEvent: event is null");
  if (auto e = snpuStreamWaitEvent(as_stream(stream), as_event(event))) return runtime_error(e, "aclrtStreamWaitEvent");
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeEvent(aclrtEvent event) {
  ACL_REQUIRE_INIT("aclrtSynchronizeEvent");
  if (!event) return fail(ACL_ERROR_INVALID_PARAM, "aclrtSynchronizeEvent: event is null");
  if (auto e = snpuEventSynchronize(as_event(event))) return runtime_error(e, "aclrtSynchronizeEvent");
  return ACL_SUCCESS;
}

aclError aclrtEventElapsedTime(float* ms, aclrtEvent startEvent, aclrtEvent endEvent) {
  ACL_REQUIRE_INIT("aclrtEventElapsedTime");
  if (!ms || !startEvent || !endEvent)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtEventElapsedTime: ms, startEvent and endEvent must not be null");
  auto e = snpuEventElapsedTime(ms, as_event(startEvent), as_event(endEvent));
  if (e == snpuErrorNotReady)
    return fail(ACL_ERROR_RT_EVENT_NOT_COMPLETE, "aclrtEventElapsedTime: an event has not completed yet");
  if (e) return runtime_error(e, "aclrtEventElapsedTime");
  return ACL_SUCCESS;
}

aclError aclrtEventGetTimestamp(aclrtEvent event, uint64_t* timestamp) {
  ACL_REQUIRE_INIT("aclrtEventGetTimestamp");
  if (!event || !timestamp)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtEventGetTimestamp: event and timestamp must not be null");
  auto e = snpuEventGetTimestamp(as_event(event), timestamp);
  if (e == snpuErrorNotReady)
    return fail(ACL_ERROR_RT_EVENT_NOT_COMPLETE, "aclrtEventGetTimestamp: the event has not completed yet");
  if (e) return runtime_error(e, "aclrtEventGetTimestamp");
  return ACL_SUCCESS;
}

}
