// The oneDNN Graph fusion group: compiles its partition per input spec
// (cached, within the memory budget), binds torch tensors and executes it.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/record_function.h>
#include <c10/util/hash.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <list>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "../buffer_pool.h"
#include "../denormals.h"
#include "../group.h"
#include "../kernel_stats.h"
#include "api.h"
#include "graph.h"
#include "layout.h"

namespace graphfuse {
namespace {

using torch::jit::Stack;

// Spec of one call: per input dtype, rank, sizes and strides.
using SpecKey = std::vector<int64_t>;
struct SpecHash {
  size_t operator()(const SpecKey& k) const { return c10::hash<SpecKey>()(k); }
};

// The constant weights one partition binds, counted in the kernel stats while a cached
// spec compiled from it lives. oneDNN keeps one reordered copy per partition and weight
// layout: the specs a partition serves at any sizes share it (measured: a group's RSS
// stays flat over 14 new lengths), so they share one charge.
struct WeightCharge {
  WeightCharge(size_t bytes, bool respecialized) : bytes(bytes), respecialized(respecialized) {
    counters().cached_weight_bytes += bytes;
    if (respecialized) counters().respecialized_weight_bytes += bytes;
  }
  ~WeightCharge() {
    counters().cached_weight_bytes -= bytes;
    if (respecialized) counters().respecialized_weight_bytes -= bytes;
  }
  WeightCharge(const WeightCharge&) = delete;
  WeightCharge& operator=(const WeightCharge&) = delete;
  const size_t bytes;
  const bool respecialized;
};

struct Entry {
  std::shared_ptr<const Compiled> compiled;  // null: this spec runs unfused
  std::vector<int64_t> sizes;              // sizes_key of the inputs it was compiled for
  std::shared_ptr<WeightCharge> weights;   // the constant inputs its partition binds
  // Per output, the input oneDNN may overwrite with it (-1: none): that
  // input's buffer becomes the output when nothing else holds it.
  std::vector<int> inplace_input;
  std::mutex mu;  // the caller holding it binds `inputs` and `outputs`
  std::vector<dg::tensor> inputs, outputs;
  std::atomic<bool> executed{false};  // the first execution also prepares the constant weights
  std::mutex tail_mu;                 // held while the first call makes `tail`
  std::atomic<bool> tail_known{false};
  ViewGraph::Plan tail;  // the group's outputs over `outputs`, with a tail
};

// A oneDNN Graph fusion group: compiles its partition per input spec.
class Kernel : public GroupBase {
 public:
  // Strides are not guarded: a spec of other strides compiles anew.
  explicit Kernel(const GroupState& state)
      : GroupBase(state, false),
        canonical_(std::to_string(state.report) + "\n" + canonical_text(state.desc)),
        desc_(GraphDesc::parse(state.desc)) {
    shape_inputs_ = state.shape_inputs;
    if (state.head) head_ = std::make_unique<ViewGraph>(state.head, "graphfuse::view_head");
    if (state.tail) tail_ = std::make_unique<ViewGraph>(state.tail, "graphfuse::view_tail");
    TORCH_CHECK(state.inputs >= shape_inputs_ + finite_flags_,
                "graphfuse::FusionGroup: fewer inputs than its shape inputs and finite flags");
    ports_ = state.inputs - shape_inputs_ - finite_flags_;
    TORCH_CHECK((head_ ? head_->inputs() == ports_ + shape_inputs_ &&
                             head_->outputs() == desc_.inputs.size()
                       : ports_ == desc_.inputs.size()) &&
                    (tail_ ? tail_->inputs() == desc_.outputs.size() + shape_inputs_ &&
                                 tail_->outputs() == state.outputs
                           : desc_.outputs.size() == state.outputs),
                "graphfuse::FusionGroup: description ports do not match the node");
    any_layout_.assign(desc_.outputs.size(), false);
    for (auto i : state.any_layout) any_layout_.at(i) = true;
    if (state.prepared >= 0) prepared_ = take_prepared(state.prepared);
    flush_denormals_ = DenormalsFlushed::supported() && state.flush_denormals;
    warm_.insert(state.warm_sizes.begin(), state.warm_sizes.end());
    for (auto id : desc_.inputs) {
      bool matmul = false, conv_src = false, others = false;
      for (const auto& op : desc_.ops)
        for (size_t k = 0; k < op.inputs.size(); ++k) {
          if (op.inputs[k] != id) continue;
          if (op.kind == dg::op::kind::MatMul)
            matmul = true;
          else if (op.kind == dg::op::kind::Convolution && k == 0)
            conv_src = true;
          else
            others = true;
        }
      matmul_only_.push_back(matmul && !conv_src && !others);
      matmul_reads_.push_back(matmul);
      conv_src_only_.push_back(conv_src && !matmul && !others);
    }
    free_layout_.assign(desc_.inputs.size(), false);
    free_seen_.assign(desc_.inputs.size(), std::nullopt);
    for (auto i : state.free_layout) free_layout_.at(i) = true;
    // A group fused again for another spec binds the same weights: not counted twice.
    for (const auto& value : constant_inputs_)
      if (value.isTensor() && !respecialized_) model_weight_bytes_ += value.toTensor().nbytes();
    counters().model_weight_bytes += model_weight_bytes_;
  }

  ~Kernel() override { counters().model_weight_bytes -= model_weight_bytes_; }

  // The specs still cached: what export saves, right after running its examples.
  std::vector<std::vector<int64_t>> compiled_sizes() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<std::vector<int64_t>> sizes;
    for (const auto& [key, cached] : cache_)
      if (cached.first->compiled) sizes.insert(cached.first->sizes);
    return {sizes.begin(), sizes.end()};
  }

  void run(Stack& stack) override {
    RECORD_FUNCTION(name_, c10::ArrayRef<const c10::IValue>{});
    auto n = desc_.inputs.size();
    // The tensors only the shape arithmetic reads come last: the fallback and the head
    // and tail take them, oneDNN does not.
    auto given_inputs = ports_ + shape_inputs_;
    if (!admitted(stack, given_inputs)) return;
    auto args = torch::jit::last(stack, given_inputs);
    // The strides of a head's and a tail's views follow from the shape inputs' sizes.
    std::vector<at::Tensor> shape;
    if (head_ || tail_)
      for (size_t i = ports_; i < given_inputs; ++i) shape.push_back(args[i].toTensor());
    std::vector<at::Tensor> viewed;  // the description's inputs, where the head makes them
    if (head_) {
      std::vector<at::Tensor> bases;
      for (size_t i = 0; i < ports_; ++i) bases.push_back(args[i].toTensor());
      viewed = head_->apply(bases, shape);
    }
    std::vector<at::Tensor> inputs;
    std::vector<Dims> strides;
    std::vector<Layout> layouts;
    std::vector<Dims> given;  // the strides an input of another layout came with
    inputs.reserve(n);
    strides.reserve(n);
    layouts.reserve(n);
    given.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const at::Tensor& t = head_ ? viewed[i] : args[i].toTensor();
      layouts.push_back(input_layout(t));
      bool other = layouts.back() == Layout::kOther;
      given.push_back(other ? t.strides().vec() : Dims{});
      if (other && (matmul_only_[i] ? matmul_reads_as_given(t.sizes(), t.strides())
                                    : conv_src_only_[i] && channels_last_1d(t))) {
        inputs.push_back(t);
        strides.push_back(given.back());
        continue;
      }
      inputs.push_back(bindable(t, matmul_reads_[i]));
      strides.push_back(canonical_strides(inputs.back()));
    }
    // A saved group's weights are the saved code's constants, first seen here: they set
    // the weight budget as a node's constant inputs do.
    if (saved_)
      std::call_once(weights_counted_, [&] {
        for (size_t i = 0; i < n; ++i)
          if (desc_.tensors.at(desc_.inputs[i]).constant) model_weight_bytes_ += inputs[i].nbytes();
        counters().model_weight_bytes += model_weight_bytes_;
      });
    auto entry = lookup(inputs, strides, layouts, given, shape);
    if (!entry || !entry->compiled) {
      ++counters().fallbacks;
      return run_fallback(stack);
    }
    // Dropped first, so an input no one else holds can be written in place.
    torch::jit::drop(stack, given_inputs);
    execute(*entry, inputs, shape, stack);
  }

 protected:
  // An input another group wrote in oneDNN's layout reaches the unfused ops
  // dense in the order the profiling runs saw: ATen's convolution and pooling
  // lay their results out as their input is, so they would otherwise give
  // other strides than eager (NHWC at a size where the guard fails). Only an
  // input in the layout it came in at the profiled sizes (oneDNN's choice):
  // one in another came from a writer that ran unfused, in eager's own layout.
  void to_eager_layouts(Stack& stack) override {
    auto base = stack.size() - fallback_inputs_;
    for (size_t i = 0; i < free_layout_.size(); ++i) {
      const auto& d = desc_.tensors.at(desc_.inputs[i]);
      auto& value = stack[base + i];
      if (!free_layout_[i] || !value.isTensor() || d.strides.empty()) continue;
      const auto& t = value.toTensor();
      if (static_cast<size_t>(t.dim()) != d.strides.size()) continue;
      auto order = order_of(d.strides);
      if (dense_in_order(t.sizes(), t.strides(), order)) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!came_as_seen(i, input_layout(t), t.strides().vec())) continue;
      }
      auto eager = at::empty_strided(t.sizes(), dense_strides(t.sizes().vec(), order), t.options());
      value = eager.copy_(t);
    }
  }

 private:
  // Inputs are bound in the two layouts oneDNN computes right with every op:
  // row-major, and channels-last for 4-d/5-d tensors. It returns garbage for
  // some others (column-major operands of a broadcasting binary op: 1.6e29 on
  // 3.12 as on v3.2, in torch's LLGA fuser, which passes them on), so any
  // other layout is copied to row-major first, unless only matmuls read the
  // input in a layout the matmul reads right (matmul_reads_as_given: attention's
  // permuted heads, whose copies cost 130 us of a 10 ms BERT layer) or only
  // convolutions read it as (N, W, C) data (channels_last_1d: wav2vec2's
  // feature encoder, where copying took 2.1 ms of 85 per call). An input a
  // matmul reads is not left channels-last: its batch dims would sit inside
  // the matrix, which oneDNN's matmul misreads. A 0-dim tensor (a scalar
  // operand) is bound as shape [1].
  static at::Tensor bindable(const at::Tensor& t, bool matmul_reads) {
    if (t.dim() == 0) return t.reshape({1});
    if (t.is_contiguous() || (!matmul_reads && channels_last(t))) return t;
    return t.contiguous();
  }

  static SpecKey spec_of(const std::vector<at::Tensor>& inputs, const std::vector<Dims>& strides,
                         const std::vector<Layout>& layouts, const std::vector<Dims>& given,
                         const std::vector<at::Tensor>& shape) {
    SpecKey key;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& t = inputs[i];
      key.push_back(static_cast<int64_t>(layouts[i]));
      // Another layout is told apart by its exact strides (see layout_change).
      if (layouts[i] == Layout::kOther) key.insert(key.end(), given[i].begin(), given[i].end());
      key.push_back(static_cast<int64_t>(t.scalar_type()));
      key.push_back(t.dim());
      key.insert(key.end(), t.sizes().begin(), t.sizes().end());
      key.insert(key.end(), strides[i].begin(), strides[i].end());
    }
    for (const auto& t : shape) {
      key.push_back(t.dim());
      key.insert(key.end(), t.sizes().begin(), t.sizes().end());
    }
    return key;
  }

  std::shared_ptr<Entry> lookup(const std::vector<at::Tensor>& inputs,
                                const std::vector<Dims>& strides,
                                const std::vector<Layout>& layouts,
                                const std::vector<Dims>& given,
                                const std::vector<at::Tensor>& shape) {
    auto key = spec_of(inputs, strides, layouts, given, shape);
    std::lock_guard<std::mutex> lock(mu_);
    if (last_ && last_key_ == key) {
      ++counters().cache_hits;
      return last_;
    }
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      ++counters().cache_hits;
    } else {
      // A spec other than the profiled one is compiled at its compile_at-th call, by default
      // its first: a compile costs less than the fused call saves, even for a size that
      // never comes again. Request streams of new sizes (BERT at 16-512 tokens, ResNet-50
      // at batch 1-32, each beside frozen TorchScript in one process, Zen 4) ran 1.25x and
      // 1.75x its speed compiling at the first call, 0.98x and 0.95x at the second.
      size_t compile_at = memory_budget().compile_at;
      if (compile_at > 1 && !at_profiled_sizes(inputs) && !warm_.count(sizes_key(inputs))) {
        auto hash = SpecHash()(key);
        auto seen = std::find_if(sightings_.begin(), sightings_.end(), [&](const Sighting& s) {
          return s.calls > 0 && s.hash == hash;
        });
        if (seen == sightings_.end()) {
          seen = sightings_.begin() + static_cast<std::ptrdiff_t>(next_sighting_++ % kSightings);
          *seen = Sighting{hash, 0};
        }
        if (++seen->calls < compile_at) {
          ++counters().unseen_spec_runs;
          return nullptr;
        }
        seen->calls = 0;
      }
      lru_.push_front(key);
      auto entry = std::make_shared<Entry>();
      compile(*entry, inputs, strides, layouts, given);
      entry->sizes = sizes_key(inputs);
      it = cache_.emplace(key, std::make_pair(std::move(entry), lru_.begin())).first;
      // The newest spec always stays; older ones go, least recently used
      // first, past the per-group count, or past the weight budget of all groups
      // where dropping the spec frees the weights its partition alone binds.
      const auto& budget = memory_budget();
      while (cache_.size() > 1) {
        const auto& oldest = cache_.at(lru_.back()).first;
        bool frees = oldest->weights && oldest->weights.use_count() == 1;
        if (cache_.size() <= budget.specs_per_group &&
            !(frees && counters().cached_weight_bytes.load() > weight_budget()))
          break;
        cache_.erase(lru_.back());
        lru_.pop_back();
        ++counters().evictions;
      }
    }
    last_ = it->second.first;
    last_key_ = std::move(key);
    return last_;
  }

  // Whether eager would lay out the group's results as in the profiling
  // runs: every input has the layout it had then (any other layout than
  // row-major and channels-last, such as a transposed key, at the very same
  // strides, or dense in the same dim order at other sizes; one bound as a
  // row-major copy also in the same stride order, which oneDNN never sees).
  // An input another group wrote in oneDNN's layout may also have the layout
  // it came in at the profiled sizes: at other sizes, that group may have run
  // unfused and given eager's layout there, which need not be the profiled one.
  std::string layout_change(const std::vector<at::Tensor>& inputs,
                            const std::vector<Layout>& layouts,
                            const std::vector<Dims>& given) const {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& d = desc_.tensors.at(desc_.inputs[i]);
      if (d.strides.empty() || d.dims.empty()) continue;
      if (free_layout_[i] && (!free_seen_[i] || came_as_seen(i, layouts[i], given[i]))) continue;
      // A matmul's result is row-major whatever its operands' layouts, as ATen's linear and
      // matmul give theirs: an input only matmuls read leaves the results as eager lays them
      // out (CvT's projections read a transposed view of a convolution's result, which is
      // row-major once that convolution's group writes it channels-last).
      if (matmul_only_[i]) continue;
      auto profiled = layout_of(d.dims, d.strides);
      bool copied = inputs[i].strides() != c10::IntArrayRef(given[i]);
      if (profiled != layouts[i] ||
          (profiled == Layout::kOther && given[i] != d.strides &&
           !same_dense_order(inputs[i].sizes(), given[i], d.dims, d.strides) &&
           !(copied && same_stride_order(inputs[i].sizes(), given[i], d.dims, d.strides))))
        return "input " + std::to_string(i) + " is laid out otherwise than in the profiling runs (" +
               c10::str(inputs[i].sizes(), " strides ", given[i], " against ", d.dims, " strides ",
                        d.strides) + ")";
    }
    return {};
  }

  // Under mu_: whether free-layout input `i` comes in the layout (with strides
  // where it is neither row-major nor channels-last) it came in at the profiled
  // sizes, the one the writing group gives when it runs fused.
  bool came_as_seen(size_t i, Layout layout, const Dims& strides) const {
    const auto& seen = free_seen_[i];
    return seen && seen->first == layout && (layout != Layout::kOther || seen->second == strides);
  }

  // At sizes other than the profiled ones, outputs the caller or ATen reads
  // take the dim order eager gave them in the profiling runs (channels-last
  // stays channels-last), with the sizes oneDNN inferred; nullopt when each
  // already has it.
  std::optional<std::vector<LogicalTensor>> outputs_in_profiled_order(const Compiled& c) const {
    std::vector<LogicalTensor> lts;
    bool reordered = false;
    for (size_t i = 0; i < desc_.outputs.size(); ++i) {
      const auto& d = desc_.tensors.at(desc_.outputs[i]);
      const auto& lt = c.outputs[i];
      auto dims = lt.get_dims();
      auto strides = lt.get_strides();
      if (!any_layout_[i] && d.strides.size() == dims.size()) {
        auto wanted = dense_strides(dims, order_of(d.strides));
        if (wanted != strides) {
          strides = wanted;
          reordered = true;
        }
      }
      lts.emplace_back(lt.get_id(), lt.get_data_type(), dims, strides,
                       LogicalTensor::property_type::variable);
    }
    if (!reordered) return std::nullopt;
    return lts;
  }

  void compile(Entry& entry, const std::vector<at::Tensor>& inputs,
               const std::vector<Dims>& strides, const std::vector<Layout>& layouts,
               const std::vector<Dims>& given) {
    RECORD_FUNCTION("graphfuse::compile", c10::ArrayRef<const c10::IValue>{});
    auto start = std::chrono::steady_clock::now();
    std::vector<LogicalTensor> in_lts;
    std::string why;
    bool profiled = at_profiled_sizes(inputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& t = inputs[i];
      const auto& d = desc_.tensors.at(desc_.inputs[i]);
      auto dtype = to_backend_dtype(t.scalar_type());
      if (!dtype || t.device().type() != c10::DeviceType::CPU || t.numel() == 0) {
        why = "input " + std::to_string(i) + " (" + std::string(c10::toString(t.scalar_type())) +
              ", " + t.device().str() + ", " + std::to_string(t.numel()) +
              " elements) cannot be bound to oneDNN";
        break;
      }
      auto property = d.constant ? LogicalTensor::property_type::constant
                                 : LogicalTensor::property_type::variable;
      in_lts.emplace_back(d.id, *dtype, t.sizes().vec(), strides[i], property);
    }
    if (why.empty() && profiled)
      for (size_t i = 0; i < inputs.size(); ++i)
        if (free_layout_[i] && !free_seen_[i]) free_seen_[i] = std::make_pair(layouts[i], given[i]);
    if (why.empty()) why = layout_change(inputs, layouts, given);
    std::shared_ptr<const Compiled> compiled;
    if (why.empty()) {
      // Every spec compiles the group's partition for any sizes: oneDNN keeps
      // one reordered copy of the constant weights per partition, so a second
      // partition for the profiled sizes held a second copy of the model's
      // weights (ViT-base: 327 MB) and ran no faster there (BERT, GPT-2, T5,
      // ViT, ResNet-50 within 3%). What such a compile makes, a group of the
      // same canonical description takes (shared_compile_key). Where oneDNN
      // takes the group only at known sizes, the profiled spec has the
      // partition found with the graph's other groups, and each other spec
      // finds its own.
      auto compile_for = [&](const std::vector<LogicalTensor>& outputs,
                             bool at_profiled_sizes) -> std::shared_ptr<const Compiled> {
        std::string key;
        if (any_sizes_partition()) {
          key = shared_compile_key(canonical_, in_lts, outputs, at_profiled_sizes);
          if (auto found = find_shared_compile(key)) {
            ++counters().shared_compiles;
            return found;
          }
        }
        if (const Prepared* generic = generic_partition()) {
          auto own = compile_partition(desc_, in_lts, outputs, at_profiled_sizes, generic, why);
          if (!own) return nullptr;
          auto made = std::make_shared<const Compiled>(std::move(*own));
          add_shared_compile(key, made);
          return made;
        }
        auto own = compile_partition(desc_, in_lts, outputs, at_profiled_sizes,
                                     profiled && prepared_ ? &*prepared_ : nullptr, why);
        return own ? std::make_shared<const Compiled>(std::move(*own)) : nullptr;
      };
      compiled = compile_for(output_lts(profiled, true), profiled);
      // Where oneDNN answers `any` with a blocked layout (3.12 picks strided
      // NHWC on x86), compile again with every output strided.
      if (compiled && !all_strided(*compiled))
        compiled = compile_for(output_lts(profiled, false), profiled);
      if (compiled && !all_strided(*compiled)) {
        compiled.reset();
        why = "oneDNN chose a non-strided output layout";
      }
      if (compiled && !profiled)
        if (auto ordered = outputs_in_profiled_order(*compiled))
          compiled = compile_for(*ordered, false);
    }
    ++counters().compiles;
    auto us = us_since(start);
    counters().compile_us += us;
    if (!compiled) {
      // One log line and one report entry per group, not a warning: a CPU
      // whose oneDNN kernels cannot run a partition (bf16 without bf16
      // instructions) would otherwise warn for every group of the model.
      ++counters().unfused_specs;
      GRAPH_UPDATE(name_, ": running unfused for this input spec: ", why);
      if (!recorded_) {
        recorded_ = true;
        record_unfused_spec(report_, name_, why);
      }
      return;
    }
    GRAPH_DEBUG(name_, ": compiled a partition of ", desc_.ops.size(), " ops in ", us, " us");
    // A partition for any sizes, this group's or shared, binds the weights once for all specs.
    bool any_sizes = any_sizes_partition();
    entry.weights = charge(inputs, any_sizes ? &generic_charge_
                                   : profiled && prepared_ ? &prepared_charge_ : nullptr);
    if (any_sizes)
      for (size_t i = 0; i < inputs.size(); ++i)
        if (desc_.tensors.at(desc_.inputs[i]).constant)
          compiled->hold(inputs[i].data_ptr(), std::make_shared<const at::Tensor>(inputs[i]));
    for (const auto& lt : compiled->inputs) entry.inputs.emplace_back(lt, cpu_engine(), nullptr);
    for (const auto& lt : compiled->outputs) entry.outputs.emplace_back(lt, cpu_engine(), nullptr);
    entry.inplace_input = inplace_inputs(*compiled);
    for (size_t o = 0; o < entry.inplace_input.size(); ++o)
      if (entry.inplace_input[o] >= 0)
        GRAPH_DEBUG(name_, ": output ", o, " may be written over input ", entry.inplace_input[o],
                    " when nothing else holds it");
    entry.compiled = std::move(compiled);
  }

  // Under mu_: the charge for the constant inputs of a partition, shared by the specs that
  // compile it (`shared`: the kernel's own partition for the profiled sizes, or the one
  // for any sizes), or one of its own for a partition found for one spec.
  std::shared_ptr<WeightCharge> charge(const std::vector<at::Tensor>& inputs,
                                       std::weak_ptr<WeightCharge>* shared) {
    if (shared)
      if (auto held = shared->lock()) return held;
    size_t bytes = 0;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (desc_.tensors.at(desc_.inputs[i]).constant) bytes += inputs[i].nbytes();
    if (bytes == 0) return nullptr;
    auto made = std::make_shared<WeightCharge>(bytes, respecialized_);
    if (shared) *shared = made;
    return made;
  }

  bool at_profiled_sizes(const std::vector<at::Tensor>& inputs) const {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].sizes() != c10::IntArrayRef(desc_.tensors.at(desc_.inputs[i]).dims))
        return false;
    return true;
  }

  // Under mu_: whether the group compiles from a partition for any sizes, its own or one a
  // group of the same description compiled (then its own is not looked for).
  bool any_sizes_partition() const { return !generic_tried_ || generic_; }

  // Under mu_: the group's partition for any input sizes, found once.
  const Prepared* generic_partition() {
    if (!generic_tried_) {
      generic_tried_ = true;
      std::string why;
      generic_ = find_generic_partition(desc_, why);
      if (generic_)
        prepared_.reset();
      else
        GRAPH_DEBUG(name_, ": no partition for any sizes, one per spec: ", why);
    }
    return generic_ ? &*generic_ : nullptr;
  }

  static bool all_strided(const Compiled& c) {
    return std::all_of(c.outputs.begin(), c.outputs.end(), [](const LogicalTensor& lt) {
      return lt.get_layout_type() == LogicalTensor::layout_type::strided;
    });
  }

  // Outputs only other groups read take the layout oneDNN prefers (`any`,
  // when `any_layout`), so the next group reads them with no reorder. The
  // rest are strided: on the profiled spec with the strides eager produced
  // (channels_last stays channels_last), otherwise dense.
  std::vector<LogicalTensor> output_lts(bool profiled, bool any_layout) const {
    std::vector<LogicalTensor> lts;
    for (size_t i = 0; i < desc_.outputs.size(); ++i) {
      const auto& d = desc_.tensors.at(desc_.outputs[i]);
      Dims dims = profiled ? d.dims : Dims(d.ndims, DNNL_GRAPH_UNKNOWN_DIM);
      if (any_layout && any_layout_[i])
        lts.emplace_back(d.id, d.dtype, dims, LogicalTensor::layout_type::any);
      else if (profiled && !d.strides.empty())
        lts.emplace_back(d.id, d.dtype, d.dims, d.strides, LogicalTensor::property_type::variable);
      else
        lts.emplace_back(d.id, d.dtype, dims, LogicalTensor::layout_type::strided);
    }
    return lts;
  }

  // The in-place pairs oneDNN reports, as input index per output, where the
  // two ports have the same dtype, sizes and strides (the buffer fits as is),
  // the input is not a constant (the caller's weights stay untouched), and
  // only one op reads the input: oneDNN 3.12 pairs `x` with the result of
  // `(x + c) / x` (an add with a binary post-op on x) and computes 1, the
  // post-op reading the sum it wrote over x.
  std::vector<int> inplace_inputs(const Compiled& c) const {
    std::vector<int> result(c.outputs.size(), -1);
    std::unordered_map<size_t, int> reads;
    for (const auto& op : desc_.ops)
      for (auto id : op.inputs) ++reads[id];
    auto index_of = [](const std::vector<LogicalTensor>& lts, size_t id) {
      for (size_t i = 0; i < lts.size(); ++i)
        if (lts[i].get_id() == id) return static_cast<int>(i);
      return -1;
    };
    for (const auto& [in_id, out_id] : c.partition.get_inplace_ports()) {
      int i = index_of(c.inputs, in_id), o = index_of(c.outputs, out_id);
      if (i < 0 || o < 0 || result[o] >= 0) continue;
      const auto &in = c.inputs[i], &out = c.outputs[o];
      if (in.get_property_type() == LogicalTensor::property_type::constant ||
          in.get_layout_type() != LogicalTensor::layout_type::strided ||
          in.get_data_type() != out.get_data_type() || in.get_dims() != out.get_dims() ||
          in.get_strides() != out.get_strides() || reads[desc_.inputs[i]] != 1)
        continue;
      result[o] = i;
    }
    return result;
  }

  // An input tensor the group may overwrite: nothing but this call holds it
  // or its storage (the interpreter moved it here at its last use), and its
  // memory came from a torch allocator, not from a caller's blob.
  static bool exclusively_held(const at::Tensor& t) {
    return t.use_count() == 1 && t.storage().use_count() == 1 &&
           t.storage().allocator() != nullptr;
  }

  // A new output tensor from the buffer pool: a freed buffer of that size
  // when there is one.
  static at::Tensor output_buffer(const LogicalTensor& lt) {
    return at::detail::empty_strided_generic(lt.get_dims(), lt.get_strides(), buffer_pool(),
                                             c10::DispatchKeySet(c10::DispatchKey::CPU),
                                             to_scalar_type(lt.get_data_type()));
  }

  // Concurrent callers of one spec do not wait for each other: the caller that finds the
  // entry's tensor handles taken binds handles of its own (a few allocations, against a
  // whole partition's execute held up). Only the first execution, which prepares the
  // constant weights, is waited for.
  void execute(Entry& entry, std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& shape,
               Stack& stack) {
    const auto& c = *entry.compiled;
    std::vector<at::Tensor> outputs;
    outputs.reserve(c.outputs.size());
    thread_local dnnl::stream stream(cpu_engine());
    std::unique_lock<std::mutex> lock(entry.mu, std::try_to_lock);
    bool first = !entry.executed.load(std::memory_order_acquire);
    if (!lock.owns_lock() && first) {
      lock.lock();
      first = !entry.executed.load(std::memory_order_relaxed);
    }
    std::vector<dg::tensor> own_inputs, own_outputs;
    if (!lock.owns_lock()) {
      for (const auto& lt : c.inputs) own_inputs.emplace_back(lt, cpu_engine(), nullptr);
      for (const auto& lt : c.outputs) own_outputs.emplace_back(lt, cpu_engine(), nullptr);
    }
    auto& bound_inputs = lock.owns_lock() ? entry.inputs : own_inputs;
    auto& bound_outputs = lock.owns_lock() ? entry.outputs : own_outputs;
    // Only the first execution is timed: no clock read on later calls.
    auto start = first ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    for (size_t o = 0; o < c.outputs.size(); ++o) {
      int i = entry.inplace_input[o];
      if (i >= 0 && inputs[i].defined() && exclusively_held(inputs[i])) {
        // Moved out of `inputs`, so no other output takes it as well.
        outputs.push_back(std::move(inputs[i]));
        bound_inputs[i].set_data_handle(outputs.back().data_ptr());
        ++counters().inplace_outputs;
      } else {
        outputs.push_back(output_buffer(c.outputs[o]));
      }
    }
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) bound_inputs[i].set_data_handle(inputs[i].data_ptr());
    for (size_t i = 0; i < outputs.size(); ++i) bound_outputs[i].set_data_handle(outputs[i].data_ptr());
    {
      auto cache = constant_cache_in_use();
      std::optional<DenormalsFlushed> flushed;
      if (flush_denormals_) {
        flushed.emplace();
        ++counters().flushed_runs;
      }
      if (first) {
        // The first execution also reorders the constant weights, which oneDNN caches.
        RECORD_FUNCTION("graphfuse::first_run", c10::ArrayRef<const c10::IValue>{});
        c.partition.execute(stream, bound_inputs, bound_outputs);
      } else {
        c.partition.execute(stream, bound_inputs, bound_outputs);
      }
      stream.wait();
    }
    if (first) {
      auto us = us_since(start);
      counters().first_run_us += us;
      GRAPH_DEBUG(name_, ": first execution (constant weights prepared) in ", us, " us");
      entry.executed.store(true, std::memory_order_release);
    }
    if (lock.owns_lock()) lock.unlock();
    if (tail_) {
      // A known plan is only read; the first call of the spec makes it, under tail_mu.
      if (entry.tail_known.load(std::memory_order_acquire)) {
        outputs = tail_->apply(outputs, shape, entry.tail);
      } else {
        std::lock_guard<std::mutex> made(entry.tail_mu);
        outputs = tail_->apply(outputs, shape, entry.tail);
        entry.tail_known.store(entry.tail.known, std::memory_order_release);
      }
    }
    ++counters().fused_runs;
    for (auto& t : outputs) stack.emplace_back(std::move(t));
  }

  // The description, ids numbered in order (canonical_text), after the pipeline run's
  // report id: groups share compiles within one run only. oneDNN keys the reordered weights
  // by partition and address, and a model frozen again after a weight changed in place
  // (torch.compile's backend does so) binds the new values at the old addresses.
  const std::string canonical_;
  const GraphDesc desc_;
  std::vector<bool> any_layout_;  // per output: only other fusion groups read it
  std::vector<bool> free_layout_;  // per input: another group wrote it in oneDNN's layout
  // Per free-layout input: its layout (and strides) at the first compile of the profiled
  // sizes, the layout the other group gives when it runs fused.
  std::vector<std::optional<std::pair<Layout, Dims>>> free_seen_;
  std::vector<bool> matmul_only_;  // per input: only MatMul ops read it (bound as it comes)
  std::vector<bool> matmul_reads_;  // per input: a MatMul reads it (bound row-major then)
  std::vector<bool> conv_src_only_;  // per input: only as a Convolution's source
  size_t shape_inputs_ = 0;       // last inputs (before the finite flags): read for sizes only
  bool flush_denormals_ = false;  // executions run with denormals flushed (../denormals.h)
  std::optional<Prepared> prepared_;  // this group's partition, found in the pipeline
  std::optional<Prepared> generic_;   // its partition for any sizes (generic_partition)
  size_t ports_ = 0;  // the inputs before the shape inputs: the description's, or the head's
  std::unique_ptr<ViewGraph> head_;  // views of its inputs the description reads, if any
  std::unique_ptr<ViewGraph> tail_;  // views of the description's outputs it outputs, if any
  bool generic_tried_ = false;
  size_t model_weight_bytes_ = 0;  // the node's constant tensor inputs
  std::once_flag weights_counted_;  // a saved group's, on its first run
  std::weak_ptr<WeightCharge> prepared_charge_, generic_charge_;
  std::mutex mu_;
  std::list<SpecKey> lru_;
  std::unordered_map<SpecKey, std::pair<std::shared_ptr<Entry>, std::list<SpecKey>::iterator>,
                     SpecHash>
      cache_;
  // Specs not compiled yet, by hash, with the calls seen: the latest kSightings, in a table
  // made with the kernel. Counted in a map, each new spec allocated a node in the middle of
  // a request, among ATen's activations, and those long-lived nodes kept glibc from reusing
  // the activations' memory: ViT fed batches 8 to 32, unfused, peaked at 4.9 GB against
  // 2.9 GB without them (frozen TorchScript: 1.6 GB). Two specs of one hash share a count:
  // one compiles a call early, and the compiled cache keys them apart.
  struct Sighting {
    size_t hash = 0;
    size_t calls = 0;
  };
  static constexpr size_t kSightings = 256;
  std::array<Sighting, kSightings> sightings_{};
  size_t next_sighting_ = 0;
  // Input sizes compiled at first sight: a saved group's exported specs.
  std::set<std::vector<int64_t>> warm_;
  std::shared_ptr<Entry> last_;  // the spec of the previous call, checked first
  SpecKey last_key_;
  bool recorded_ = false;  // the first spec run unfused went to the report
};

}  // namespace

std::optional<std::vector<double>> time_partition(const std::string& text,
                                                  const std::vector<at::Tensor>& inputs,
                                                  int64_t runs, std::string& why) {
  TORCH_CHECK(onednn::availability().ok, "torch_graphfuse: ", onednn::availability().problem);
  auto desc = GraphDesc::parse(text);
  TORCH_CHECK(inputs.size() == desc.inputs.size(), "torch_graphfuse: ", inputs.size(),
              " inputs for a description of ", desc.inputs.size());
  std::vector<LogicalTensor> in_lts, out_lts;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    auto dtype = to_backend_dtype(t.scalar_type());
    TORCH_CHECK(dtype && t.device().is_cpu(), "torch_graphfuse: input ", i, " cannot be bound");
    auto property = desc.tensors.at(desc.inputs[i]).constant
                        ? LogicalTensor::property_type::constant
                        : LogicalTensor::property_type::variable;
    in_lts.emplace_back(desc.inputs[i], *dtype, t.sizes().vec(), t.strides().vec(), property);
  }
  for (auto id : desc.outputs) {
    const auto& d = desc.tensors.at(id);
    out_lts.emplace_back(id, d.dtype, d.dims, LogicalTensor::layout_type::strided);
  }
  auto compiled = compile_partition(desc, in_lts, out_lts, true, nullptr, why);
  if (!compiled) return std::nullopt;
  auto& engine = cpu_engine();
  std::vector<dg::tensor> ins, outs;
  std::vector<at::Tensor> buffers;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.emplace_back(compiled->inputs[i], engine, inputs[i].data_ptr());
  for (const auto& lt : compiled->outputs) {
    buffers.push_back(at::empty({static_cast<int64_t>(lt.get_mem_size())}, at::kByte));
    outs.emplace_back(lt, engine, buffers.back().data_ptr());
  }
  dnnl::stream stream(engine);
  auto cache = constant_cache_in_use();
  std::vector<double> seconds;
  // The first run also prepares the constants, as a group's first call does.
  for (int64_t r = -1; r < runs; ++r) {
    auto start = std::chrono::steady_clock::now();
    compiled->partition.execute(stream, ins, outs);
    stream.wait();
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (r >= 0) seconds.push_back(took.count());
  }
  return seconds;
}

std::shared_ptr<GroupBase> onednn_group(const GroupState& state) {
  TORCH_CHECK(onednn::availability().ok, "torch_graphfuse: ", onednn::availability().problem);
  return std::make_shared<Kernel>(state);
}

}  // namespace graphfuse
