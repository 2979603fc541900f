#include "backend/profiler/correlation.h"

#include <vector>

#include "softnpu/runtime.h"

namespace softnpu::profiler {

namespace {

thread_local std::vector<uint64_t> t_ops;

// The runtime call cannot fail here: the runtime is up, since the session that forwards these calls exists.
void tag_launches(uint64_t id) { snpuActivitySetCorrelationId(id); }

}  // namespace

void push_op(uint64_t correlation_id) {
  t_ops.push_back(correlation_id);
  tag_launches(correlation_id);
}

// A pop without its push (the session began inside an op) leaves the stack alone.
void pop_op() {
  if (!t_ops.empty()) t_ops.pop_back();
  tag_launches(current_op());
}

uint64_t current_op() { return t_ops.empty() ? 0 : t_ops.back(); }

}  // namespace softnpu::profiler
