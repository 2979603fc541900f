// A loaded offline model: its constants in npu device memory, every node's kernel resolved, and a slot plan (which
// value each node reads and writes, and after which node a value is dead). Executing enqueues ONE kernel on the
// stream that runs the nodes in order; nothing of the graph is looked up at run time.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <map>
#include <memory>
#include <set>

#include "common/kernel_threads.h"
#include "model/graph.h"
#include "model/model.h"
#include "model/ops/direct_conv.h"
#include "model/ops/op.h"
#include "model/ops/winograd.h"
#include "model/precision.h"

namespace softnpu::offline {

std::string device_soc_version() {
  snpuSocProfile soc{};
  return snpuGetSocProfile(nullptr, &soc) == snpuSuccess ? soc.name : "";
}

bool known_soc_version(const std::string& name) {
  snpuSocProfile soc{};
  return snpuGetSocProfile(name.c_str(), &soc) == snpuSuccess;
}

std::string soc_version_choices() {
  int count = 0;
  snpuGetSocProfileCount(&count);
  std::string names;
  for (int i = 0; i < count; ++i) {
    snpuSocProfile soc{};
    snpuGetSocProfileByIndex(i, &soc);
    names += (i ? ", " : "") + std::string(soc.name);
  }
  return names;
}

namespace {

// Within the model's team, a node that reads and writes less than this runs on one thread: waking the second thread
// costs such a node more than it gains. Measured on the tiny BERT at batch 1 (every node below 1 MiB: 1.32x
// onnxruntime's time on one thread, 1.52x when every node got two), while its batch 32 and resnet18 (nodes of 1 MiB
// and more) need the team for their GEMMs and convolutions (BERT batch 32: 25 ms on one thread, 16 ms on two).
constexpr uint64_t kParallelStepBytes = 1 << 20;

struct Step {
  std::string label;  // "Conv 'conv1'": what an error names
  Kernel kernel;
  std::vector<int> in, out;
  std::vector<int> release;  // slots dead after this step
  enum Precision { kKeep, kFp16, kFp32 } precision = kKeep;
  bool own_kernel = false;     // softnpu's own kernel: the model's team, through the thread pool's cheap hand-out
  bool round_out = false;      // fp16: its float outputs rounded (not for ops that keep float16 values)
  std::vector<bool> round_in;  // fp16: the inputs not already rounded (by the conversion or an fp16 producer)
};

// A weight in npu device memory, in the given memory format.
at::Tensor device_copy(const at::Tensor& t, at::MemoryFormat format = at::MemoryFormat::Contiguous) {
  void* p = nullptr;
  size_t bytes = std::max<size_t>(t.nbytes(), 1);
  if (snpuMalloc(&p, bytes) != snpuSuccess)
    throw std::runtime_error(std::string("out of npu memory for the model's weights: ") + snpuGetLastErrorMessage());
  auto c = t.contiguous(format);
  if (c.nbytes()) std::memcpy(p, c.data_ptr(), c.nbytes());
  return at::from_blob(p, t.sizes(), c.strides(), [](void* q) { snpuFree(q); },
                       at::TensorOptions().dtype(t.scalar_type()));
}

// A MatMul or Gemm whose constant matrix the direct kernel can take: a matrix times it, plus a bias of its columns
// (Gemm: transA 0, alpha and beta 1, C absent or a constant of N values; MatMul's fused bias is).
bool packable_matmul(const onnx::NodeProto& n, const std::map<std::string, at::Tensor>& constants) {
  if (n.input_size() < 2 || !constants.count(n.input(1))) return false;
  if (n.op_type() == "MatMul") return true;
  if (n.op_type() != "Gemm") return false;
  Attrs a(n);
  if (a.i("transA", 0) || a.f("alpha", 1.f) != 1.f || a.f("beta", 1.f) != 1.f) return false;
  if (n.input_size() < 3 || n.input(2).empty()) return true;
  auto c = constants.find(n.input(2));
  const auto& b = constants.at(n.input(1));
  int64_t cols = b.dim() == 2 ? b.size(a.i("transB", 0) ? 0 : 1) : -1;
  return c != constants.end() && c->second.numel() == cols && (c->second.dim() == 1 || c->second.size(0) == 1);
}

class LoadedModel final : public Model {
 public:
  explicit LoadedModel(Graph g) : g_(std::move(g)) {}

  void prepare() {
    std::map<std::string, int> slot;
    auto slot_of = [&](const std::string& name) {
      auto it = slot.find(name);
      if (it != slot.end()) return it->second;
      int s = num_slots_++;
      slot[name] = s;
      return s;
    };
    // The layout pass: each convolution's filter is stored the way its kernel reads it. Where the host has the
    // kernels, Winograd's transformed filter if conversion chose Winograd for the node (passes.cpp), else the direct
    // kernel's packed filter (direct_conv.h); a filter read by anything else stays as it is, and its convolutions
    // run ATen's. ATen's filters are kept channels-last, the layout oneDNN's convolutions run fastest in (their
    // activations follow: the kernel converts its input, and elementwise ops and pooling keep the format). The
    // constant matrix of a MatMul or Gemm is packed for the direct kernel the same way (a matrix product is its 1x1
    // convolution), when nothing else reads it.
    constexpr int kAsIs = 0, kDirect = 1, kMatrix = 8, kMatrixT = 9;  // else Winograd's m (2 or 4)
    std::map<std::string, int> layout;
    std::set<std::string> conv_weights;
    auto read_as = [&](const std::string& name, int l) {
      auto [it, fresh] = layout.emplace(name, l);
      if (!fresh && it->second != l) it->second = kAsIs;
    };
    for (const auto& o : g_.outputs) read_as(o.name, kAsIs);
    for (const auto& n : g_.nodes)
      for (int i = 0; i < n.input_size(); ++i) {
        int l = kAsIs;
        if (i == 1 && n.op_type() == "Conv" && g_.constants.count(n.input(1))) {
          const auto& w = g_.constants.at(n.input(1));
          Attrs a(n);
          int m = static_cast<int>(a.i("softnpu_winograd", 0));
          l = direct::supported(w, a.i("group", 1)) ? (m ? m : kDirect) : kAsIs;
          conv_weights.insert(n.input(1));
        }
        if (i == 1 && packable_matmul(n, g_.constants)) {
          bool transposed = n.op_type() == "Gemm" && Attrs(n).i("transB", 0);
          if (direct::matrix_supported(g_.constants.at(n.input(1)), transposed)) l = transposed ? kMatrixT : kMatrix;
        }
        read_as(n.input(i), l);
      }
    for (auto& n : g_.nodes) {
      int l = n.input_size() > 1 && layout.count(n.input(1)) ? layout.at(n.input(1)) : kAsIs;
      if (n.op_type() == "MatMul" || n.op_type() == "Gemm") set_int_attr(n, "softnpu_packed", l == kMatrix || l == kMatrixT);
      if (n.op_type() != "Conv") continue;
      set_int_attr(n, "softnpu_winograd", l == kAsIs || l == kDirect ? 0 : l);
      set_int_attr(n, "softnpu_direct", l == kDirect);
    }
    for (const auto& [name, t] : g_.constants) {
      int s = slot_of(name);
      int l = layout.count(name) ? layout.at(name) : kAsIs;
      at::Tensor stored;
      if (l == kDirect)
        stored = device_copy(direct::pack_filter(t));
      else if (l == kMatrix || l == kMatrixT)
        stored = device_copy(direct::pack_matrix(t, l == kMatrixT));
      else if (l != kAsIs)
        stored = device_copy(winograd::transform_filter(t, l));
      else
        stored = device_copy(t, conv_weights.count(name) && t.dim() == 4 && t.is_floating_point() ? at::MemoryFormat::ChannelsLast
                                                                                                  : at::MemoryFormat::Contiguous);
      weight_bytes_ += stored.nbytes();
      constants_.emplace_back(s, std::move(stored));
    }
    for (const auto& in : g_.inputs) input_slots_.push_back(slot_of(in.name));
    std::map<int, size_t> last_use;
    std::set<int> rounded;  // slots whose float32 values are already float16 values
    for (const auto& c : constants_) rounded.insert(c.first);
    for (const auto& n : g_.nodes) {
      const OpDef* def = find_op(n);
      if (!def) throw std::runtime_error("no softnpu kernel for op type " + n.op_type());
      Step st;
      st.label = describe(n);
      OpContext ctx{n, Attrs(n), static_cast<int>(g_.metadata.opset), n.input_size(), n.output_size()};
      st.kernel = def->build(ctx);
      auto prec = Attrs(n).s("softnpu_precision", "");
      st.precision = prec == "fp16" ? Step::kFp16 : prec == "fp32" ? Step::kFp32 : Step::kKeep;
      for (const auto& i : n.input()) {
        st.in.push_back(i.empty() ? -1 : slot.at(i));
        if (!i.empty()) last_use[slot.at(i)] = steps_.size();
      }
      for (const auto& o : n.output()) st.out.push_back(o.empty() ? -1 : slot_of(o));
      Attrs a(n);
      // softnpu's own convolution and matrix kernels store an fp16 node's float16 values themselves (nn.cpp).
      bool rounds_itself = a.i("softnpu_winograd", 0) || a.i("softnpu_direct", 0) || a.i("softnpu_packed", 0);
      st.own_kernel = rounds_itself || (n.domain() == "softnpu" && n.op_type() == "SoftmaxAttention");
      if (st.precision == Step::kFp16) {
        st.round_out = !keeps_half_values(n.op_type()) && !rounds_itself;
        for (size_t k = 0; k < st.in.size(); ++k)
          st.round_in.push_back(st.in[k] >= 0 && !rounded.count(st.in[k]) && !is_value_input(*def, static_cast<int>(k)));
        rounded.insert(st.out.begin(), st.out.end());
      }
      steps_.push_back(std::move(st));
    }
    step_bytes_ = std::make_unique<std::atomic<uint64_t>[]>(steps_.size());
    for (const auto& out : g_.outputs) output_slots_.push_back(slot.at(out.name));
    std::set<int> keep(output_slots_.begin(), output_slots_.end());
    for (const auto& c : constants_) keep.insert(c.first);
    for (const auto& [s, step] : last_use)
      if (!keep.count(s)) steps_[step].release.push_back(s);
    for (size_t i = 0; i < g_.inputs.size(); ++i) {
      int64_t n = 1;
      for (auto d : max_dims(i)) n *= d;
      input_bytes_.push_back(n * c10::elementSize(scalar_type(g_.inputs[i].dtype)));
    }
  }

  const std::vector<TensorDesc>& inputs() const override { return g_.inputs; }
  const std::vector<TensorDesc>& outputs() const override { return g_.outputs; }
  size_t input_size(size_t i) const override { return i < input_bytes_.size() ? input_bytes_[i] : 0; }
  size_t output_size(size_t i) const override { return i < g_.output_max_bytes.size() ? g_.output_max_bytes[i] : 0; }
  const std::vector<int64_t>& batch_profiles() const override { return g_.batch_profiles; }
  const std::vector<std::vector<int64_t>>& dims_profiles() const override { return g_.dims_profiles; }
  std::string metadata_json() const override {
    const auto& m = g_.metadata;
    return "{\"softnpu_version\": \"" + json_escape(m.softnpu_version) + "\", \"soc_version\": \"" +
           json_escape(m.soc_version) + "\", \"opset\": " + std::to_string(m.opset) + ", \"producer\": \"" +
           json_escape(m.producer) + "\", \"atc_command\": \"" + json_escape(m.atc_command) +
           "\", \"precision_mode\": \"" + json_escape(m.precision_mode) + "\"}";
  }
  std::string to_json() const override { return graph_json(g_); }

  Status execute_async(snpuStream_t stream, const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                       const std::vector<std::vector<int64_t>>& input_dims,
                       std::shared_ptr<std::vector<std::vector<int64_t>>> output_dims,
                       std::shared_ptr<std::vector<void*>> allocated) override {
    if (inputs.size() != g_.inputs.size() || outputs.size() != g_.outputs.size())
      return Status::error("E19999", "The model takes " + std::to_string(g_.inputs.size()) + " inputs and " +
                                         std::to_string(g_.outputs.size()) + " outputs; got " +
                                         std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()) + ".");
    for (size_t i = 0; i < outputs.size(); ++i)
      if (!outputs[i] && g_.output_max_bytes[i] > 0)
        return Status::error("E19999", "Output " + std::to_string(i) + " (" + g_.outputs[i].name +
                                           ") needs a buffer: only outputs whose shape depends on data are allocated by the run.");
    auto* run = new Run{this, inputs, outputs, {}, std::move(output_dims), std::move(allocated)};
    for (size_t i = 0; i < g_.inputs.size(); ++i) {
      auto dims = i < input_dims.size() && !input_dims[i].empty() ? input_dims[i] : g_.inputs[i].dims;
      const auto& model_dims = g_.inputs[i].dims;
      bool ok = dims.size() == model_dims.size();
      int64_t n = 1;
      for (size_t k = 0; ok && k < dims.size(); ++k) {
        ok = dims[k] >= 0 && (model_dims[k] < 0 || model_dims[k] == dims[k]);
        n *= dims[k];
      }
      if (ok) ok = static_cast<size_t>(n) * c10::elementSize(scalar_type(g_.inputs[i].dtype)) <= input_bytes_[i];
      if (!ok) {
        delete run;
        return Status::error("E19999", "Input " + std::to_string(i) + " (" + g_.inputs[i].name +
                                           ") has dims the model does not accept.");
      }
      run->input_dims.push_back(std::move(dims));
    }
    if (snpuLaunchKernel(stream, "om_model", &LoadedModel::kernel, run, [](void* p) { delete static_cast<Run*>(p); }) !=
        snpuSuccess)
      return Status::error("E19999", std::string("launch failed: ") + snpuGetLastErrorMessage());
    return Status{};
  }

 private:
  struct Run {
    LoadedModel* model;
    std::vector<void*> inputs, outputs;
    std::vector<std::vector<int64_t>> input_dims;
    std::shared_ptr<std::vector<std::vector<int64_t>>> output_dims;
    std::shared_ptr<std::vector<void*>> allocated;
  };

  std::vector<int64_t> max_dims(size_t i) const {
    auto dims = g_.inputs[i].dims;
    size_t k = 0;
    for (size_t j = 0; j < i; ++j)
      for (auto d : g_.inputs[j].dims) k += d < 0;
    for (auto& d : dims) {
      if (d >= 0) continue;
      int64_t m = 0;
      for (auto b : g_.batch_profiles) m = std::max(m, b);
      for (const auto& p : g_.dims_profiles) m = std::max(m, k < p.size() ? p[k] : 0);
      d = m;
      ++k;
    }
    return dims;
  }

  static int kernel(void* arg) {
    auto* run = static_cast<Run*>(arg);
    auto& m = *run->model;
    const Step* current = nullptr;
    // No autograd: a model's run records nothing, and each of its ATen calls skips the autograd dispatch.
    c10::InferenceMode inference;
    try {
      // The run reads the weights and writes every node's outputs: a small model with large activations (a
      // transformer at batch 32) is not a small kernel. The activations are those of the last run (none before the
      // first): the shapes they depend on are the inputs', which rarely change between runs.
      uint64_t inputs = 0;
      for (size_t i = 0; i < m.input_slots_.size(); ++i) inputs += m.input_bytes_[i];
      const int team = snpuKernelThreadBudget(m.weight_bytes_ + inputs + m.activation_bytes_.load(std::memory_order_relaxed));
      uint64_t written = 0;
      std::vector<at::Tensor> slots(m.num_slots_);
      for (const auto& [s, t] : m.constants_) slots[s] = t;
      for (size_t i = 0; i < m.input_slots_.size(); ++i)
        slots[m.input_slots_[i]] = at::from_blob(run->inputs[i], run->input_dims[i],
                                                 at::TensorOptions().dtype(scalar_type(m.g_.inputs[i].dtype)));
      Tensors in, out;
      for (const auto& st : m.steps_) {
        current = &st;
        in.assign(st.in.size(), at::Tensor());
        for (size_t k = 0; k < st.in.size(); ++k)
          if (st.in[k] >= 0) in[k] = slots[st.in[k]];
        bool half_in = st.precision == Step::kFp32 && has_half(in);
        if (st.precision != Step::kKeep) round_inputs(st, in);
        out.assign(st.out.size(), at::Tensor());
        auto& step_bytes = m.step_bytes_[&st - m.steps_.data()];
        set_kernel_threads(st.own_kernel || step_bytes.load(std::memory_order_relaxed) >= kParallelStepBytes ? team : 1);
        st.kernel(in, out);
        if (st.round_out) {
          round_outputs(in, out);
        } else if (st.precision == Step::kFp32) {
          for (size_t k = 0; k < out.size(); ++k)
            if (half_in && out[k].defined() && out[k].scalar_type() == at::kFloat) out[k] = out[k].to(at::kHalf);
        }
        uint64_t bytes = 0;
        for (const auto& t : in) bytes += t.defined() ? t.nbytes() : 0;
        for (size_t k = 0; k < st.out.size(); ++k) {
          if (out[k].defined()) written += out[k].nbytes(), bytes += out[k].nbytes();
          if (st.out[k] >= 0) slots[st.out[k]] = std::move(out[k]);
        }
        step_bytes.store(bytes, std::memory_order_relaxed);
        for (int s : st.release) slots[s].reset();
      }
      current = nullptr;
      m.activation_bytes_.store(written, std::memory_order_relaxed);
      std::vector<std::vector<int64_t>> dims;
      for (size_t i = 0; i < m.output_slots_.size(); ++i) {
        const auto& r = slots[m.output_slots_[i]];
        if (!r.defined()) throw std::runtime_error("output " + m.g_.outputs[i].name + " is an empty optional");
        void* dst = run->outputs[i];
        if (!dst) {
          if (snpuMalloc(&dst, std::max<size_t>(r.nbytes(), 1)) != snpuSuccess)
            throw std::runtime_error("out of npu memory for output " + m.g_.outputs[i].name);
          if (run->allocated) {
            run->allocated->resize(m.output_slots_.size(), nullptr);
            (*run->allocated)[i] = dst;
          }
        } else if (m.g_.output_max_bytes[i] > 0 && static_cast<int64_t>(r.nbytes()) > m.g_.output_max_bytes[i]) {
          throw std::runtime_error("output " + m.g_.outputs[i].name + " needs " + std::to_string(r.nbytes()) +
                                   " bytes, more than the model's bound of " + std::to_string(m.g_.output_max_bytes[i]));
        }
        storage_bytes(at::from_blob(dst, r.sizes(), at::TensorOptions().dtype(r.scalar_type()))).copy_(storage_bytes(r));
        dims.push_back(r.sizes().vec());
      }
      if (run->output_dims) *run->output_dims = std::move(dims);
      return 0;
    } catch (const c10::Error& e) {
      fail(current, e.what_without_backtrace());
    } catch (const std::exception& e) {
      fail(current, e.what());
    }
    return 1;
  }

  static void fail(const Step* st, const std::string& what) {
    snpuKernelSetErrorMessage(((st ? "node " + st->label + ": " : std::string("model: ")) + what).c_str());
  }

  static bool has_half(const Tensors& in) {
    for (const auto& t : in)
      if (t.defined() && t.scalar_type() == at::kHalf) return true;
    return false;
  }

  // fp16: float32 inputs rounded to half precision; fp32: half inputs widened (the node then computes in float32).
  static void round_inputs(const Step& st, Tensors& in) {
    if (st.precision == Step::kFp16)
      for (size_t k = 0; k < in.size(); ++k)
        if (st.round_in[k] && in[k].defined() && in[k].scalar_type() == at::kFloat) in[k] = round_to_half(in[k]);
    if (st.precision == Step::kFp32)
      for (auto& t : in)
        if (t.defined() && t.scalar_type() == at::kHalf) t = t.to(at::kFloat);
  }

  // fp16: float32 outputs rounded to half precision, in place unless the output is a view of an input (which other
  // nodes, or the caller, still read).
  static void round_outputs(const Tensors& in, Tensors& out) {
    for (auto& t : out) {
      if (!t.defined() || t.scalar_type() != at::kFloat) continue;
      bool view = false;
      for (const auto& i : in) view = view || (i.defined() && i.has_storage() && t.storage().is_alias_of(i.storage()));
      if (view)
        t = round_to_half(t);
      else
        round_to_half_(t);
    }
  }

  Graph g_;
  int num_slots_ = 0;
  std::vector<std::pair<int, at::Tensor>> constants_;
  std::vector<int> input_slots_, output_slots_;
  std::vector<size_t> input_bytes_;
  std::vector<Step> steps_;
  size_t weight_bytes_ = 0;
  std::atomic<uint64_t> activation_bytes_{0};  // what the last run's nodes wrote
  std::unique_ptr<std::atomic<uint64_t>[]> step_bytes_;  // per step, what it read and wrote on the last run
};

}  // namespace

std::unique_ptr<Model> Model::load(const void* data, size_t size, Status* status) {
  Status local;
  if (!status) status = &local;
  Graph g = read_om(data, size, status);
  if (!status->ok) return nullptr;
  try {
    auto m = std::make_unique<LoadedModel>(std::move(g));
    m->prepare();
    return m;
  } catch (const std::exception& e) {
    *status = Status::error("E19999", std::string("The offline model cannot be loaded: ") + e.what(),
                            "Convert the model again with this softnpu's atc.");
    return nullptr;
  }
}

}  // namespace softnpu::offline
