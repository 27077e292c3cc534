// oneDNN Graph mechanism shared by the partitioner bindings and the FusionGroup
// kernel. No torch headers here: this is the only place that talks to oneDNN.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include <oneapi/dnnl/dnnl_graph.hpp>

namespace graphfuse {

namespace dg = dnnl::graph;
using LogicalTensor = dg::logical_tensor;
using DataType = dg::logical_tensor::data_type;
using Dims = std::vector<int64_t>;

// One logical tensor of a description. Unknown rank is ndims == -1, an
// unknown dimension is DNNL_GRAPH_UNKNOWN_DIM (-1 in the text form); strides
// are empty when unknown.
struct TensorDesc {
  size_t id = 0;
  DataType dtype = DataType::undef;
  bool constant = false;
  int ndims = -1;
  Dims dims;
  Dims strides;
};

using AttrValue = std::variant<int64_t, float, bool, std::string,
                               std::vector<int64_t>, std::vector<float>>;

struct OpDesc {
  size_t id = 0;
  dg::op::kind kind = dg::op::kind::Wildcard;
  std::vector<size_t> inputs;
  std::vector<size_t> outputs;
  std::vector<std::pair<dg::op::attr, AttrValue>> attrs;
};

// A backend graph in the line format written by torch_graphfuse/backends/onednn/graph_desc.py:
//   t <id> <dtype> <c|v> <ndims> <dims...> [s <strides...>]
//   o <id> <Kind> <n_in> <ids...> <n_out> <ids...> <n_attr> (<name> <type> <n> <values...>)*
//   in <ids...>      (FusionGroup input order)
//   out <ids...>     (FusionGroup output order)
struct GraphDesc {
  std::unordered_map<size_t, TensorDesc> tensors;
  std::vector<OpDesc> ops;
  std::vector<size_t> inputs;
  std::vector<size_t> outputs;

  static GraphDesc parse(const std::string& text);  // throws std::invalid_argument
};

struct PartitionInfo {
  bool supported = false;
  std::vector<size_t> ops;
  std::vector<size_t> inputs;
  std::vector<size_t> outputs;
};

// Partitions of a whole description, as oneDNN chooses them (fusion policy).
// An op oneDNN refuses to add (say, an attribute it does not know) stands in
// as a Wildcard; its id and oneDNN's message go to `refused`.
std::vector<PartitionInfo> partition_graph(
    const GraphDesc& desc, std::vector<std::pair<size_t, std::string>>& refused);

// A compiled partition with the logical tensors it was compiled for, in the
// description's input/output order.
struct Compiled {
  dg::compiled_partition partition;
  std::vector<LogicalTensor> inputs;
  std::vector<LogicalTensor> outputs;

  // A partition several groups share (shared_compile_key) holds the constant inputs each
  // bound, by address, while it lives: oneDNN keys their reordered copies by address and
  // never drops one, so weights of a model loaded after another was freed, at the same
  // addresses, would otherwise be read through the shared partition as the freed ones.
  void hold(const void* address, std::shared_ptr<const void> owner) const {
    std::lock_guard<std::mutex> lock(held_->mu);
    held_->owners.emplace(address, std::move(owner));
  }

 private:
  struct Held {
    std::mutex mu;
    std::unordered_map<const void*, std::shared_ptr<const void>> owners;
  };
  std::shared_ptr<Held> held_ = std::make_shared<Held>();
};

// Builds the description's ops into one graph with the given concrete input
// logical tensors (desc.inputs order), and compiles it. Output logical tensors
// are taken from `outputs` when given, else inferred. `profiled`: the inputs
// have the description's sizes, so its intermediate sizes hold too.
// Returns nullopt, with `why` set, when oneDNN does not take the whole
// description as exactly one supported partition or refuses to compile it.
// A group's partition found before its first compile, in one oneDNN call for
// all the groups of a graph: get_partitions costs milliseconds per call,
// mostly fixed, so one call per group would dominate a model's first run.
// Its ops and tensors carry the group's description ids + base.
struct Prepared {
  dg::partition partition;
  size_t base = 0;
};

// Partitions the groups together; per group a ticket for take_prepared, or
// -1 where oneDNN did not return exactly that group as one partition.
std::vector<int64_t> prepare_partitions(const std::vector<GraphDesc>& descs);
// The prepared partition of a ticket, once: each partition is compiled by
// one kernel only (oneDNN keys its constant-weight cache by partition).
std::optional<Prepared> take_prepared(int64_t ticket);

// A partition of the group for any sizes of its inputs (every dim unknown).
// Compiled for each input spec, the profiled one included, it keeps one
// partition per group: oneDNN 3.12 keys its cache of reordered constant
// weights by partition, weight layout and address, and never drops an entry,
// so a partition found anew per spec would add a copy of the weights per spec.
std::optional<Prepared> find_generic_partition(const GraphDesc& desc, std::string& why);

// Compiles the group for these port tensors: `prepared`'s partition, or one
// found now by a oneDNN call for this group alone.
std::optional<Compiled> compile_partition(const GraphDesc& desc,
                                          const std::vector<LogicalTensor>& inputs,
                                          const std::vector<LogicalTensor>& outputs,
                                          bool profiled, const Prepared* prepared,
                                          std::string& why);

// The description with its tensor and op ids numbered in order of appearance:
// the groups of a model's repeated layers, whose ids differ, read the same.
std::string canonical_text(const std::string& text);

// Compiled partitions shared by the groups of one canonical description (the
// kernel prefixes it with its pipeline run, within which weights never change),
// compiled from their partition for any sizes for the same port tensors (ids
// aside, the ports in description order): a model's repeated layers compile
// once per distinct group at a new size, not once per layer. oneDNN mixes the
// addresses of an execution's constant inputs into the key of their reordered
// copies, so groups sharing a compiled partition keep their own weights. An
// entry lives while a group's cached spec holds it.
std::string shared_compile_key(const std::string& canonical,
                               const std::vector<LogicalTensor>& inputs,
                               const std::vector<LogicalTensor>& outputs, bool profiled);
std::shared_ptr<const Compiled> find_shared_compile(const std::string& key);
void add_shared_compile(const std::string& key, const std::shared_ptr<const Compiled>& compiled);

dnnl::engine& cpu_engine();

// oneDNN's cache of constant buffers (reordered weights, int8 scales and zero
// points), shared by every partition of the process: executions hold it
// shared, so it is never switched off under a running partition.
std::shared_lock<std::shared_mutex> constant_cache_in_use();

// Maps between the description's names and oneDNN enums.
std::optional<dg::op::kind> op_kind_from_name(const std::string& name);
std::optional<dg::op::attr> op_attr_from_name(const std::string& name);
std::optional<DataType> data_type_from_name(const std::string& name);

}  // namespace graphfuse
