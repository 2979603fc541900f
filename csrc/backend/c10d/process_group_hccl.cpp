#include "backend/c10d/process_group_hccl.h"

#include "backend/c10d/collective_fault.h"
#include "backend/error_code.h"
#include "backend/interrupt.h"
#include "backend/profiler/collective_trace.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/irange.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

namespace softnpu {

namespace {

const c10::impl::VirtualGuardImpl& npu_guard() {
  static const c10::impl::VirtualGuardImpl impl(c10::DeviceType::PrivateUse1);
  return impl;
}

void check_reduce_op(const c10d::ReduceOp& op, const char* title) {
  TORCH_CHECK(op != c10d::ReduceOp::PREMUL_SUM, title,
              ": ReduceOp.PREMUL_SUM is not supported (softnpu's hccl reduces with Gloo, which has no PREMUL_SUM)");
}

// Gloo's Work future, or none: Gloo's send/recv and reduce-scatter Works have none and complete only in wait().
c10::intrusive_ptr<c10::ivalue::Future> future_of(c10d::Work& gloo_work) {
  try {
    return gloo_work.getFuture();
  } catch (const c10::Error&) {
    return {};
  }
}

}  // namespace

// The Work of an hccl call, completed when its Gloo Work completes (its future, or a thread waiting on it), when an
// injected hccl_timeout runs out, or when its group is aborted: whichever comes first.
class WorkHCCL final : public c10d::Work {
 public:
  WorkHCCL(int rank, c10d::OpType type, const char* title, std::optional<c10::Device> device,
           std::optional<c10::Stream> comm, std::vector<at::Tensor> outputs, std::vector<at::Tensor> host_outputs)
      : Work(rank, type, title),
        title_(title),
        comm_(comm),
        outputs_(std::move(outputs)),
        host_outputs_(std::move(host_outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()),
            device ? std::vector<c10::Device>{*device} : std::vector<c10::Device>{})) {}

  // A Gloo Work without a future, which completes only when waited on: a thread of its own waits on it, so that this
  // Work completes by itself and wait() can poll for Ctrl-C (Gloo's wait cannot be sliced: a timeout puts its whole
  // context in error).
  void complete_when_done(c10::intrusive_ptr<c10d::Work> gloo_work, c10d_fault::Context ctx) {
    unfinished_ = gloo_work;
    std::thread([self = c10::intrusive_ptr<WorkHCCL>::reclaim_copy(this), gloo_work = std::move(gloo_work), ctx] {
      std::exception_ptr error;
      try {
        gloo_work->wait();
      } catch (...) {
        error = c10d_fault::from_transport(std::current_exception(), ctx);
      }
      self->complete(error);
    }).detach();
  }

  // An injected hccl_timeout: nothing runs, and the Work fails with `error` after `timeout` unless it completed first.
  void fail_after(std::chrono::milliseconds timeout, std::exception_ptr error) {
    std::thread([self = c10::intrusive_ptr<WorkHCCL>::reclaim_copy(this), timeout, error] {
      {
        std::unique_lock<std::mutex> lock(self->mutex_);
        self->cv_.wait_for(lock, timeout, [&] { return self->completed_; });
      }
      self->complete(error);
    }).detach();
  }

  // Gloo has completed (successfully unless `error`): copies the outputs back on the communication stream and
  // completes the future there, so whoever waits on it orders its stream after the copies.
  // While a profiler records: the collective started at start_ns (collective_begin()) on `stream`, moving `bytes`.
  void trace(int64_t start_ns, c10::Stream stream, uint64_t bytes) {
    trace_start_ns_ = start_ns;
    trace_stream_ = stream;
    trace_bytes_ = bytes;
  }

  // The first call decides; later ones (Gloo completing after an abort) change nothing.
  void complete(std::exception_ptr error) {
    if (done_.exchange(true)) return;
    if (trace_start_ns_ != 0) profiler::collective_end(trace_start_ns_, title_, *trace_stream_, trace_bytes_);
    if (!error) {
      try {
        std::optional<c10::StreamGuard> on_comm;
        if (comm_) on_comm.emplace(*comm_);
        // Plain data movement into the caller's tensors, which may be leaves that require grad.
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        for (size_t i = 0; i < outputs_.size(); ++i) outputs_[i].copy_(host_outputs_[i], /*non_blocking=*/true);
        future_->markCompleted(c10::IValue(outputs_));
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (error) future_->setErrorIfNeeded(error);
    // The caching host allocator keeps each pinned buffer from reuse until its copy has run.
    host_outputs_.clear();
    finish(error);
  }

  // Waits in slices, polling for Ctrl-C between them; an interrupted wait leaves the collective running.
  bool wait(std::chrono::milliseconds timeout) override {
    {
      std::unique_lock<std::mutex> lock(wait_done(timeout));
      if (exception_) std::rethrow_exception(exception_);
    }
    synchronize();
    return true;
  }

  // Waits until the Work completed, successfully or not (the lock held on return).
  std::unique_lock<std::mutex> wait_done(std::chrono::milliseconds timeout = kNoTimeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!completed_) {
      std::chrono::microseconds slice(kInterruptPollMicros);
      if (timeout != kNoTimeout) {
        const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline -
                                                                                std::chrono::steady_clock::now());
        TORCH_CHECK(left.count() > 0, title_, ": timed out after ", timeout.count(), " ms");
        slice = std::min(slice, left);
      }
      if (cv_.wait_for(lock, slice, [&] { return completed_; })) break;
      lock.unlock();
      poll_interrupt();
      lock.lock();
    }
    return lock;
  }

  bool done() const { return done_; }

  // The current streams wait for the copies back (the future recorded them).
  void synchronize() override { future_->wait(); }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

  std::vector<at::Tensor> result() override { return outputs_; }

  int sourceRank() const override { return unfinished_ ? unfinished_->sourceRank() : Work::sourceRank(); }

 private:
  const char* title_;
  int64_t trace_start_ns_ = 0;
  std::optional<c10::Stream> trace_stream_;
  uint64_t trace_bytes_ = 0;
  const std::optional<c10::Stream> comm_;
  const std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> host_outputs_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  c10::intrusive_ptr<c10d::Work> unfinished_;
  std::atomic<bool> done_{false};
};

namespace {

// NCCL's and HCCL's rules for the collectives between a tensor and a tensor `world_size` times its size: the same
// dtype, and element counts that match whatever the shapes (flat or stacked).
void check_into_tensor(const at::Tensor& small, const at::Tensor& large, int world_size, const char* title,
                       const char* small_name, const char* large_name) {
  if (small.scalar_type() != large.scalar_type())
    C10_THROW_ERROR(TypeError, c10::str(title, ": ", large_name, " tensor must have the same type as ", small_name,
                                        " tensor, got ", large.scalar_type(), " and ", small.scalar_type()));
  if (small.numel() * world_size != large.numel())
    C10_THROW_ERROR(ValueError, c10::str(title, ": ", large_name, " tensor size must be equal to world_size times ",
                                         small_name, " tensor size (", world_size, " x ", small.numel(), " = ",
                                         small.numel() * world_size, " elements), got ", large.numel(),
                                         " elements"));
}

void check_into_tensors(const std::vector<at::Tensor>& smalls, const std::vector<at::Tensor>& larges, int world_size,
                        const char* title, const char* small_name, const char* large_name) {
  if (smalls.size() != larges.size())
    C10_THROW_ERROR(ValueError, c10::str(title, ": expected as many ", large_name, " tensors as ", small_name,
                                         " tensors, got ", larges.size(), " and ", smalls.size()));
  for (size_t i = 0; i < smalls.size(); ++i)
    check_into_tensor(smalls[i], larges[i], world_size, title, small_name, large_name);
}

}  // namespace

// The npu tensors of one call and their pinned host buffers. Inputs are copied into their buffers at once
// (asynchronously, on the current stream); outputs are remembered for the copy back.
class Staging {
 public:
  enum Use { kIn = 1, kOut = 2, kInOut = kIn | kOut };

  Staging(c10d::OpType type, const char* title) : type(type), title(title) {}

  // For the reducing collectives, before their tensors are staged.
  void reduce_with(const c10d::ReduceOp& op) {
    check_reduce_op(op, title);
    reduces = true;
    compares = op == c10d::ReduceOp::MIN || op == c10d::ReduceOp::MAX;
  }

  at::Tensor stage(const at::Tensor& t, Use use) {
    TORCH_CHECK(t.device().is_privateuseone(), title, ": expected npu tensors, got a tensor on ", t.device());
    TORCH_CHECK(t.layout() == c10::kStrided, title, ": expected dense tensors, got layout ", t.layout());
    TORCH_CHECK(!device || *device == t.device(), title, ": all tensors must be on one device, got ", *device,
                " and ", t.device());
    device = t.device();
    at::Tensor host = at::empty(t.sizes(), t.options().device(c10::kCPU).pinned_memory(true));
    if (use & kIn) {
      in_bytes += t.nbytes();
      const at::AutoDispatchBelowADInplaceOrView below_autograd;
      host.copy_(t, /*non_blocking=*/true);
      has_inputs = true;
    }
    if (use & kOut) {
      out_bytes += t.nbytes();
      outputs.push_back(t);
      host_outputs.push_back(host);
    }
    return for_gloo(host);
  }

  // The buffer as a flat view, for the "into tensor" collectives: HCCL and NCCL read and write their buffers as
  // flat memory (any shape with the right element count), where Gloo wants its chunks of dim 0 to have the input's
  // exact shape. The copy back goes through the buffer of the tensor's own shape.
  at::Tensor stage_flat(const at::Tensor& t, Use use) { return stage(t, use).view({-1}); }

  std::vector<at::Tensor> stage_flat(const std::vector<at::Tensor>& ts, Use use) {
    std::vector<at::Tensor> host;
    host.reserve(ts.size());
    for (const auto& t : ts) host.push_back(stage_flat(t, use));
    return host;
  }

  std::vector<at::Tensor> stage(const std::vector<at::Tensor>& ts, Use use) {
    std::vector<at::Tensor> host;
    host.reserve(ts.size());
    for (const auto& t : ts) host.push_back(stage(t, use));
    return host;
  }

  std::vector<std::vector<at::Tensor>> stage(const std::vector<std::vector<at::Tensor>>& lists, Use use) {
    std::vector<std::vector<at::Tensor>> host;
    host.reserve(lists.size());
    for (const auto& ts : lists) host.push_back(stage(ts, use));
    return host;
  }

  // Gloo has no int16, uint16, uint32 or uint64. uint32 and uint64 go as the signed type of their width, which moves
  // the same bits and sums and multiplies to the same bits (two's complement): only comparisons would differ. The 16-bit
  // integers go as float16, which moves their bits but cannot reduce them.
  at::Tensor for_gloo(const at::Tensor& host) const {
    const auto dtype = host.scalar_type();
    if (dtype == c10::kShort || dtype == c10::kUInt16) {
      TORCH_CHECK(!reduces, title, ": reducing ", dtype,
                  " is not supported (softnpu's hccl reduces with Gloo, which has no 16-bit integers)");
      return host.view(c10::kHalf);
    }
    if (dtype != c10::kUInt32 && dtype != c10::kUInt64) return host;
    TORCH_CHECK(!compares, title, ": MIN and MAX of ", dtype,
                " are not supported (softnpu's hccl reduces with Gloo, which has no unsigned types wider than uint8)");
    return host.view(dtype == c10::kUInt32 ? c10::kInt : c10::kLong);
  }

  const c10d::OpType type;
  const char* const title;
  bool reduces = false;
  bool compares = false;
  std::optional<c10::Device> device;
  bool has_inputs = false;
  uint64_t in_bytes = 0;   // staged for reading (the payload, for the profiler)
  uint64_t out_bytes = 0;  // staged for writing back
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> host_outputs;
};

ProcessGroupHCCL::ProcessGroupHCCL(c10::intrusive_ptr<c10d::Backend> gloo, std::chrono::milliseconds timeout)
    : c10d_npu::ProcessGroupHCCL(gloo->getRank(), gloo->getSize()), gloo_(std::move(gloo)),
      timeout_ms_(timeout.count()) {
  init();
}

ProcessGroupHCCL::~ProcessGroupHCCL() = default;

void ProcessGroupHCCL::setTimeout(std::chrono::milliseconds timeout) {
  gloo("hccl:set_timeout")->setTimeout(timeout);
  timeout_ms_ = timeout.count();
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupHCCL::gloo(const char* title) {
  const std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!closed_, "[Rank ", rank_, "] ", title, ": the ProcessGroupHCCL ", *closed_,
              "; destroy it and create a new group", error_code(SubModule::DIST, ErrCode::HCCL, rank_));
  return gloo_;
}

std::vector<c10::intrusive_ptr<WorkHCCL>> ProcessGroupHCCL::pending() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<c10::intrusive_ptr<WorkHCCL>> alive;
  std::vector<c10::weak_intrusive_ptr<WorkHCCL>> still;
  for (const auto& weak : pending_) {
    if (auto work = weak.lock(); work && !work->done()) {
      alive.push_back(work);
      still.push_back(weak);
    }
  }
  pending_ = std::move(still);
  return alive;
}

void ProcessGroupHCCL::abort(const std::string& reason) {
  c10::intrusive_ptr<c10d::Backend> gloo;
  std::string closed;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!closed_) closed_ = reason.empty() ? "was aborted" : "was aborted: " + reason;
    closed = *closed_;
    gloo = std::move(gloo_);
  }
  std::exception_ptr error;
  try {
    TORCH_CHECK(false, "[Rank ", rank_, "] the ProcessGroupHCCL ", closed, ", so its pending collective failed",
                error_code(SubModule::DIST, ErrCode::HCCL, rank_));
  } catch (...) {
    error = std::current_exception();
  }
  for (const auto& work : pending()) work->complete(error);
  // Destroying a Gloo backend waits for its ops in flight, which end only when their peers answer or their timeout
  // runs out: a thread of its own lets them.
  if (gloo) std::thread([gloo = std::move(gloo)]() mutable { gloo.reset(); }).detach();
}

void ProcessGroupHCCL::shutdown() {
  for (const auto& work : pending()) work->wait_done();
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!closed_) closed_ = "was shut down";
  gloo_.reset();
}

void ProcessGroupHCCL::die(const char* title) {
  std::fprintf(stderr, "softnpu: rank %d dies in %s (an injected dead_peer fault)\n", rank_, title);
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  std::abort();  // not reached: SIGKILL cannot be caught
}

c10::Stream ProcessGroupHCCL::comm_stream(c10::Device device) {
  const std::lock_guard<std::mutex> lock(streams_mutex_);
  auto it = comm_streams_.find(device.index());
  if (it == comm_streams_.end())
    it = comm_streams_.emplace(device.index(), npu_guard().getStreamFromGlobalPool(device, /*isHighPriority=*/true))
             .first;
  return it->second;
}

template <typename GlooOp>
c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::run(Staging& s, GlooOp&& gloo_op) {
  const c10::intrusive_ptr<c10d::Backend> gloo = this->gloo(s.title);
  const c10d_fault::Kind fault = c10d_fault::take(s.title);
  if (fault == c10d_fault::Kind::kDeadPeer) die(s.title);
  const c10d_fault::Context ctx{s.title, rank_, size_, std::chrono::milliseconds(timeout_ms_.load())};
  // Gloo reads the input buffers as soon as one of its threads picks the op up.
  if (s.has_inputs) npu_guard().synchronizeStream(npu_guard().getStream(*s.device));
  std::optional<c10::Stream> comm;
  if (!s.outputs.empty()) {
    comm = comm_stream(*s.device);
    // The copies back go after the current stream's work so far (which may still use the outputs' memory, e.g. a
    // block its stream just recycled), and the outputs' memory must not return to the stream they were allocated on
    // before those copies.
    c10::Event launched(c10::DeviceType::PrivateUse1);
    launched.record(npu_guard().getStream(*s.device));
    launched.block(*comm);
    for (const auto& t : s.outputs) npu_guard().recordDataPtrOnStream(t.storage().data_ptr(), *comm);
  }

  const int64_t traced = profiler::collective_begin();
  // An injected hccl_timeout: the op never reaches Gloo, so the peers wait for this rank until their timeout.
  c10::intrusive_ptr<c10d::Work> gloo_work = fault == c10d_fault::Kind::kTimeout ? nullptr : gloo_op(*gloo);
  auto work = c10::make_intrusive<WorkHCCL>(rank_, s.type, s.title, s.device, comm, std::move(s.outputs),
                                            std::move(s.host_outputs));
  if (traced != 0 && s.device)
    work->trace(traced, comm ? *comm : npu_guard().getStream(*s.device), s.in_bytes ? s.in_bytes : s.out_bytes);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    // Completed Works leave the list now and then, so that it stays as long as what is in flight.
    if (pending_.size() >= prune_at_) {
      std::erase_if(pending_, [](const auto& weak) {
        const auto w = weak.lock();
        return !w || w->done();
      });
      prune_at_ = std::max<size_t>(64, 2 * pending_.size());
    }
    pending_.emplace_back(work);
  }
  if (!gloo_work) {
    work->fail_after(ctx.timeout, c10d_fault::timeout_error(ctx, "softnpu: an injected hccl_timeout fault: this "
                                                                 "rank's collective never started"));
  } else if (auto gloo_future = future_of(*gloo_work)) {
    gloo_future->addCallback([work, ctx](c10::ivalue::Future& f) {
      work->complete(f.hasError() ? c10d_fault::from_transport(f.exception_ptr(), ctx) : nullptr);
    });
  } else {
    work->complete_when_done(std::move(gloo_work), ctx);
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  Staging s(c10d::OpType::BROADCAST, "hccl:broadcast");
  auto host = s.stage(tensors, opts.rootRank == rank_ ? Staging::kIn : Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.broadcast(host, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  Staging s(c10d::OpType::ALLREDUCE, "hccl:all_reduce");
  s.reduce_with(opts.reduceOp);
  auto host = s.stage(tensors, Staging::kInOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.allreduce(host, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  Staging s(c10d::OpType::ALLREDUCE_COALESCED, "hccl:all_reduce_coalesced");
  s.reduce_with(opts.reduceOp);
  auto host = s.stage(tensors, Staging::kInOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.allreduce_coalesced(host, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  Staging s(c10d::OpType::REDUCE, "hccl:reduce");
  s.reduce_with(opts.reduceOp);
  // Only the root's tensor receives the result; the others keep their values.
  auto host = s.stage(tensors, opts.rootRank == rank_ ? Staging::kInOut : Staging::kIn);
  return run(s, [&](c10d::Backend& gloo) { return gloo.reduce(host, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  Staging s(c10d::OpType::ALLGATHER, "hccl:all_gather");
  auto host_in = s.stage(inputs, Staging::kIn);
  auto host_out = s.stage(outputs, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.allgather(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  Staging s(c10d::OpType::_ALLGATHER_BASE, "hccl:all_gather_into_tensor");
  check_into_tensor(input, output, size_, s.title, "input", "output");
  auto host_in = s.stage_flat(input, Staging::kIn);
  auto host_out = s.stage_flat(output, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo._allgather_base(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Staging s(c10d::OpType::ALLGATHER_COALESCED, "hccl:all_gather_coalesced");
  auto host_in = s.stage(inputs, Staging::kIn);
  auto host_out = s.stage(output_lists, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.allgather_coalesced(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  Staging s(c10d::OpType::COALESCED, "hccl:all_gather_into_tensor_coalesced");
  check_into_tensors(inputs, outputs, size_, s.title, "input", "output");
  auto host_in = s.stage_flat(inputs, Staging::kIn);
  auto host_out = s.stage_flat(outputs, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.allgather_into_tensor_coalesced(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  Staging s(c10d::OpType::GATHER, "hccl:gather");
  auto host_in = s.stage(inputs, Staging::kIn);
  auto host_out = s.stage(outputs, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.gather(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  Staging s(c10d::OpType::SCATTER, "hccl:scatter");
  auto host_in = s.stage(inputs, Staging::kIn);
  auto host_out = s.stage(outputs, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.scatter(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  Staging s(c10d::OpType::REDUCE_SCATTER, "hccl:reduce_scatter");
  s.reduce_with(opts.reduceOp);
  auto host_in = s.stage(inputs, Staging::kIn);
  auto host_out = s.stage(outputs, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.reduce_scatter(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  Staging s(c10d::OpType::_REDUCE_SCATTER_BASE, "hccl:reduce_scatter_tensor");
  s.reduce_with(opts.reduceOp);
  check_into_tensor(output, input, size_, s.title, "output", "input");
  auto host_in = s.stage_flat(input, Staging::kIn);
  auto host_out = s.stage_flat(output, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo._reduce_scatter_base(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  Staging s(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, "hccl:reduce_scatter_tensor_coalesced");
  s.reduce_with(opts.reduceOp);
  check_into_tensors(outputs, inputs, size_, s.title, "output", "input");
  auto host_in = s.stage_flat(inputs, Staging::kIn);
  auto host_out = s.stage_flat(outputs, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.reduce_scatter_tensor_coalesced(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& output_split_sizes,
                                                               std::vector<int64_t>& input_split_sizes,
                                                               const c10d::AllToAllOptions& opts) {
  Staging s(c10d::OpType::ALLTOALL_BASE, "hccl:all_to_all_single");
  auto host_in = s.stage(input, Staging::kIn);
  auto host_out = s.stage(output, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.alltoall_base(host_out, host_in, output_split_sizes, input_split_sizes, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  Staging s(c10d::OpType::ALLTOALL, "hccl:all_to_all");
  auto host_in = s.stage(inputs, Staging::kIn);
  auto host_out = s.stage(outputs, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.alltoall(host_out, host_in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  Staging s(c10d::OpType::SEND, "hccl:send");
  auto host = s.stage(tensors, Staging::kIn);
  return run(s, [&](c10d::Backend& gloo) { return gloo.send(host, dst_rank, tag); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  Staging s(c10d::OpType::RECV, "hccl:recv");
  auto host = s.stage(tensors, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.recv(host, src_rank, tag); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  Staging s(c10d::OpType::RECVANYSOURCE, "hccl:recv_anysource");
  auto host = s.stage(tensors, Staging::kOut);
  return run(s, [&](c10d::Backend& gloo) { return gloo.recvAnysource(host, tag); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::barrier(const c10d::BarrierOptions& opts) {
  Staging s(c10d::OpType::BARRIER, "hccl:barrier");
  return run(s, [&](c10d::Backend& gloo) { return gloo.barrier(opts); });
}

namespace {

// The Work of a batch: complete when each of its operations' Works is; waiting waits for each.
class BatchWork final : public c10d::Work {
 public:
  explicit BatchWork(std::vector<c10::intrusive_ptr<c10d::Work>> works)
      : c10d::Work(-1, c10d::OpType::UNKNOWN), works_(std::move(works)) {}

  bool isCompleted() override {
    for (const auto& work : works_) {
      if (!work->isCompleted()) return false;
    }
    return true;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (const auto& work : works_) work->wait(timeout);
    return true;
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupHCCL::batch_isend_irecv(std::vector<std::string>& op_type,
                                                                   std::vector<at::Tensor>& tensors,
                                                                   std::vector<int64_t> remote_rank_list) {
  TORCH_CHECK(op_type.size() == tensors.size() && tensors.size() == remote_rank_list.size(),
              "batch_isend_irecv: op_type, tensors and remote_rank_list must have the same length, got ",
              op_type.size(), ", ", tensors.size(), " and ", remote_rank_list.size());
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (const auto i : c10::irange(tensors.size())) {
    std::vector<at::Tensor> one{tensors[i]};
    const int peer = static_cast<int>(remote_rank_list[i]);
    if (op_type[i] == "isend") {
      works.push_back(send(one, peer, 0));
    } else if (op_type[i] == "irecv") {
      works.push_back(recv(one, peer, 0));
    } else {
      TORCH_CHECK(false, "batch_isend_irecv: op_type must be \"isend\" or \"irecv\", got \"", op_type[i], "\"");
    }
  }
  return c10::make_intrusive<BatchWork>(std::move(works));
}

}  // namespace softnpu
