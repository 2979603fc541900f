#include "event.h"

#include <chrono>

#include "activity.h"
#include "stream.h"

namespace softnpu::rt {

Event::~Event() {
  if (stream_) stream_->release();
}

uint64_t Event::record(Stream* s) {
  std::lock_guard lock(mutex_);
  Task task{};
  task.kind = TaskKind::kRecord;
  task.name = "EventRecord";
  task.correlation_id = activity::correlation_id();
  task.record.event = this;
  task.record.generation = ++generation_;
  retain();  // the marker's reference
  uint64_t seq = s->enqueue(task);
  s->retain();
  if (stream_) stream_->release();
  stream_ = s;
  seq_ = seq;
  capture_id_ = 0;
  return seq;
}

void Event::record_in_capture(uint64_t capture_id) {
  std::lock_guard lock(mutex_);
  ++generation_;
  if (stream_) stream_->release();
  stream_ = nullptr;
  seq_ = 0;
  capture_id_ = capture_id;
}

uint64_t Event::capture_id() {
  std::lock_guard lock(mutex_);
  return capture_id_;
}

Event::Capture Event::capture() {
  std::lock_guard lock(mutex_);
  if (stream_) stream_->retain();
  return {stream_, seq_};
}

bool Event::complete() {
  std::lock_guard lock(mutex_);
  return !stream_ || stream_->reached(seq_);
}

void Event::on_marker(uint64_t generation) {
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch()).count();
  std::lock_guard lock(mutex_);
  if (generation == generation_) time_ns_ = now;
}

Event::TimeState Event::timestamp(int64_t* ns) {
  std::lock_guard lock(mutex_);
  if (!stream_) return TimeState::kNotRecorded;
  if (!stream_->reached(seq_)) return TimeState::kNotReady;
  *ns = time_ns_;
  return TimeState::kValid;
}

}  // namespace softnpu::rt
