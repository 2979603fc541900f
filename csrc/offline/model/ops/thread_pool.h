// The thread pool of softnpu's own kernels (the direct kernel's convolutions and matrix products): a part of the work
// costs the caller nothing to hand out. OpenMP's team (at::parallel_for) sleeps between parallel regions, and waking
// it took ~35 us per region on a 2-core host, more than a matrix product of the tiny BERT at batch 1 takes on one
// thread; ONNX Runtime's pool spins between the ops of a run for the same reason. Here the helpers spin for a while
// after each job, and the caller never waits for a helper to wake: parts are claimed one at a time, so a late helper
// finds them done.
#pragma once

#include <cstdint>
#include <functional>

namespace softnpu::offline {

// fn(begin, end) over [0, n), in parts claimed by the caller and up to threads - 1 helpers; returns when every part
// has run. threads is the thread budget of the calling kernel (the executor's OpenMP setting for the node,
// at::get_num_threads()). Callers on other compute threads at the same time run their work on their own thread.
void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace softnpu::offline
