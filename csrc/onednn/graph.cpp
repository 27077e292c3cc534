// Partitions and compiles backend descriptions with oneDNN Graph: a whole
// description's partitions for the Python partitioner, a graph's groups
// partitioned in one call, and each group compiled per input spec.
#include "graph.h"

#include "../kernel_stats.h"
#include "verbose.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>

namespace graphfuse {
namespace {

LogicalTensor to_logical(const TensorDesc& t, bool with_dims,
                         LogicalTensor::layout_type layout = LogicalTensor::layout_type::strided,
                         size_t base = 0) {
  auto property = t.constant ? LogicalTensor::property_type::constant
                             : LogicalTensor::property_type::variable;
  if (t.ndims < 0) return LogicalTensor(t.id + base, t.dtype, -1, layout, property);
  Dims dims = with_dims ? t.dims : Dims(t.ndims, DNNL_GRAPH_UNKNOWN_DIM);
  return LogicalTensor(t.id + base, t.dtype, dims, layout, property);
}

// The same logical tensor under another id.
LogicalTensor renumbered(const LogicalTensor& lt, size_t id) {
  if (lt.get_layout_type() == LogicalTensor::layout_type::strided)
    return LogicalTensor(id, lt.get_data_type(), lt.get_dims(), lt.get_strides(),
                         lt.get_property_type());
  return LogicalTensor(id, lt.get_data_type(), lt.get_dims(), lt.get_layout_type(),
                       lt.get_property_type());
}

// A group's logical tensors by description id, carrying id + base: inside
// the partition oneDNN's choice of layout, at the group's ports strided
// torch tensors (`overrides`, when given, are the ports' actual tensors).
std::unordered_map<size_t, LogicalTensor> group_tensors(
    const GraphDesc& desc, bool profiled, size_t base,
    const std::vector<LogicalTensor>& overrides = {}) {
  std::set<size_t> ports(desc.inputs.begin(), desc.inputs.end());
  ports.insert(desc.outputs.begin(), desc.outputs.end());
  std::unordered_map<size_t, LogicalTensor> lts;
  for (const auto& [id, t] : desc.tensors)
    lts.emplace(id, to_logical(t, profiled,
                               ports.count(id) ? LogicalTensor::layout_type::strided
                                               : LogicalTensor::layout_type::any,
                               base));
  for (const auto& lt : overrides) lts.insert_or_assign(lt.get_id(), renumbered(lt, lt.get_id() + base));
  return lts;
}

dg::op make_op(const OpDesc& d, const std::unordered_map<size_t, LogicalTensor>& lts,
               size_t base = 0) {
  dg::op op(d.id + base, d.kind, "graphfuse_" + std::to_string(d.id));
  for (auto id : d.inputs) op.add_input(lts.at(id));
  for (auto id : d.outputs) op.add_output(lts.at(id));
  for (const auto& [name, value] : d.attrs)
    std::visit([&, name = name](const auto& v) { op.set_attr(name, v); }, value);
  return op;
}

// oneDNN 3.12's int8 convolution patterns, matching a convolution whose
// source a Dequantize produces, read the producer of its weight without
// checking that it has one (check_f8_conv_with_no_scale_and_zp): a weight no
// op of the graph produces crashes get_partitions. Each convolution input no
// op produces gets a Wildcard with no inputs as its producer, a partition of
// its own that changes no other. Ids from next_id on (+ base); returns the
// next free one.
size_t add_missing_producers(dg::graph& graph, const GraphDesc& desc,
                             const std::unordered_map<size_t, LogicalTensor>& lts, size_t base,
                             size_t next_id) {
  std::set<size_t> produced, wanted;
  for (const auto& d : desc.ops) produced.insert(d.outputs.begin(), d.outputs.end());
  for (const auto& d : desc.ops)
    if (d.kind == dg::op::kind::Convolution || d.kind == dg::op::kind::ConvTranspose)
      for (auto id : d.inputs)
        if (!produced.count(id)) wanted.insert(id);
  for (auto id : wanted)
    graph.add_op(dg::op(base + next_id++, dg::op::kind::Wildcard, {}, {lts.at(id)}, "producer"));
  return next_id;
}

// Held shared by executions, alone while the constant cache is switched.
std::shared_mutex g_constant_cache_mu;

// oneDNN 3.12 keys a partition's entry in the constant cache by a hash of its
// id and of its constant buffers' descriptors, mixed with the addresses of its
// constant inputs. Without constant inputs, the hash alone tells partitions
// apart, and it collides for partitions whose ids differ by 1 and whose
// buffers have the same descriptors: the int8 scales and zero points oneDNN
// makes from Quantize and Dequantize attributes. The second partition then
// runs with the first one's zero points (1 of 5000 one-group uint8 models,
// each with other zero points, came out wrong). Such a partition is compiled
// with the cache off, so it keeps no buffer across executions and recomputes
// its few scalars on each. oneDNN reads the switch when it compiles and again
// when it executes, where a partition compiled with the cache on skips
// computing its constant buffers if it is off: hence the lock. Each switch
// flushes the cache, and every weight is reordered again at its next
// execution (35 ms for BERT-base), so only these partitions switch it: oneDNN
// makes constant buffers from constant inputs and from these attributes (in
// 10 zoo models, fp32 and bf16, no partition without a constant input kept a
// buffer past its first execution, counted through an engine allocator).
class ConstantCacheOff {
 public:
  ConstantCacheOff() : lock_(g_constant_cache_mu) { dg::set_constant_tensor_cache(0); }
  ~ConstantCacheOff() { dg::set_constant_tensor_cache(1); }
  ConstantCacheOff(const ConstantCacheOff&) = delete;
  ConstantCacheOff& operator=(const ConstantCacheOff&) = delete;

 private:
  std::unique_lock<std::shared_mutex> lock_;
};

}  // namespace

std::shared_lock<std::shared_mutex> constant_cache_in_use() {
  return std::shared_lock<std::shared_mutex>(g_constant_cache_mu);
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine = [] {
    // Frozen weights are bound as constant logical tensors: let oneDNN keep
    // their reordered copies across executions.
    dg::set_constant_tensor_cache(1);
    // Each kernel caches its own compiled partitions within a budget; oneDNN's
    // cache of them would keep every evicted one alive.
    dg::set_compiled_partition_cache_capacity(0);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

std::vector<PartitionInfo> partition_graph(
    const GraphDesc& desc, std::vector<std::pair<size_t, std::string>>& refused) {
  std::unordered_map<size_t, LogicalTensor> lts;
  for (const auto& [id, t] : desc.tensors) lts.emplace(id, to_logical(t, true));
  dg::graph graph(dnnl::engine::kind::cpu);
  size_t next_id = 0;
  for (const auto& d : desc.ops) {
    next_id = std::max(next_id, d.id + 1);
    try {
      graph.add_op(make_op(d, lts));
    } catch (const dnnl::error& e) {
      refused.emplace_back(d.id, e.what());
      OpDesc wildcard{d.id, dg::op::kind::Wildcard, d.inputs, d.outputs, {}};
      graph.add_op(make_op(wildcard, lts));
    }
  }
  const size_t first_added = next_id;
  add_missing_producers(graph, desc, lts, 0, next_id);
  graph.finalize();
  std::vector<PartitionInfo> result;
  for (const auto& p : graph.get_partitions(dg::partition::policy::fusion)) {
    PartitionInfo info;
    info.supported = p.is_supported();
    for (auto id : p.get_ops())
      if (id < first_added) info.ops.push_back(id);
    if (info.ops.empty()) continue;
    for (const auto& lt : p.get_input_ports()) info.inputs.push_back(lt.get_id());
    for (const auto& lt : p.get_output_ports()) info.outputs.push_back(lt.get_id());
    result.push_back(std::move(info));
  }
  return result;
}

namespace {

// Ids a group's description uses: tensors, ops, one End op per output and
// at most one producer per op input (add_missing_producers).
size_t id_span(const GraphDesc& desc) {
  size_t tensors = 0, ops = 0, inputs = 0;
  for (const auto& [id, t] : desc.tensors) tensors = std::max(tensors, id + 1);
  for (const auto& d : desc.ops) {
    ops = std::max(ops, d.id + 1);
    inputs += d.inputs.size();
  }
  return std::max(tensors, ops + desc.outputs.size() + inputs);
}

// Adds a group's ops, ids shifted by base, and an End op per output: every
// group output is consumed outside the group, so oneDNN must keep it even
// where an op inside the group also consumes it.
void add_group(dg::graph& graph, const GraphDesc& desc,
               const std::unordered_map<size_t, LogicalTensor>& lts, size_t base) {
  size_t next_id = 0;
  for (const auto& d : desc.ops) {
    graph.add_op(make_op(d, lts, base));
    next_id = std::max(next_id, d.id + 1);
  }
  for (auto id : desc.outputs)
    graph.add_op(dg::op(base + next_id++, dg::op::kind::End, {lts.at(id)}, {}, "end"));
  add_missing_producers(graph, desc, lts, base, next_id);
}

// The one partition among `partitions` that is exactly the group (ids
// shifted by base), or none, with why.
std::optional<dg::partition> group_partition(std::vector<dg::partition>& partitions,
                                             const GraphDesc& desc, size_t base,
                                             std::string& why) {
  std::set<size_t> wanted;
  for (const auto& d : desc.ops) wanted.insert(d.id + base);
  std::optional<dg::partition> chosen;
  for (auto& p : partitions) {
    auto ids = p.get_ops();
    if (std::none_of(ids.begin(), ids.end(), [&](size_t i) { return wanted.count(i); }))
      continue;
    if (chosen || !p.is_supported() || std::set<size_t>(ids.begin(), ids.end()) != wanted) {
      why = "oneDNN does not take these ops as one partition for these inputs";
      return std::nullopt;
    }
    chosen = std::move(p);
  }
  if (!chosen) {
    why = "oneDNN returned no partition";
    return std::nullopt;
  }
  std::set<size_t> in_ports, out_ports, in_wanted, out_wanted;
  for (const auto& lt : chosen->get_input_ports()) in_ports.insert(lt.get_id());
  for (const auto& lt : chosen->get_output_ports()) out_ports.insert(lt.get_id());
  for (auto id : desc.inputs) in_wanted.insert(id + base);
  for (auto id : desc.outputs) out_wanted.insert(id + base);
  if (in_ports != in_wanted || out_ports != out_wanted) {
    why = "partition ports differ from the fusion group's inputs/outputs";
    return std::nullopt;
  }
  return chosen;
}

// Partitions by ticket, until a group's kernel takes its own. A graph the
// pipeline ran on may never get kernels (torch discards some copies), so only
// the newest tickets wait: a group whose ticket was dropped finds its
// partition at its first compile, as one whose batch call failed does.
constexpr size_t kWaitingTickets = 4096;
std::mutex g_prepared_mu;
std::map<int64_t, Prepared> g_prepared;
int64_t g_next_ticket = 0;

}  // namespace

std::vector<int64_t> prepare_partitions(const std::vector<GraphDesc>& descs) {
  std::vector<int64_t> tickets(descs.size(), -1);
  size_t stride = 1;
  for (const auto& desc : descs) stride = std::max(stride, id_span(desc));
  dg::graph graph(dnnl::engine::kind::cpu);
  std::vector<dg::partition> partitions;
  try {
    for (size_t k = 0; k < descs.size(); ++k)
      add_group(graph, descs[k], group_tensors(descs[k], true, k * stride), k * stride);
    graph.finalize();
    partitions = graph.get_partitions(dg::partition::policy::fusion);
  } catch (const dnnl::error&) {
    return tickets;  // each group finds its partition at its first compile
  }
  std::vector<std::vector<dg::partition>> by_group(descs.size());
  for (auto& p : partitions) {
    auto ops = p.get_ops();
    if (!ops.empty() && ops.front() / stride < descs.size())
      by_group[ops.front() / stride].push_back(std::move(p));
  }
  std::lock_guard<std::mutex> lock(g_prepared_mu);
  for (size_t k = 0; k < descs.size(); ++k) {
    std::string why;
    auto p = group_partition(by_group[k], descs[k], k * stride, why);
    if (!p) continue;
    tickets[k] = g_next_ticket++;
    g_prepared.emplace(tickets[k], Prepared{std::move(*p), k * stride});
  }
  while (g_prepared.size() > kWaitingTickets) g_prepared.erase(g_prepared.begin());
  return tickets;
}

std::optional<Prepared> take_prepared(int64_t ticket) {
  std::lock_guard<std::mutex> lock(g_prepared_mu);
  auto it = g_prepared.find(ticket);
  if (it == g_prepared.end()) return std::nullopt;
  Prepared p = std::move(it->second);
  g_prepared.erase(it);
  return p;
}

namespace {

// The group's partition in a graph of the group alone, its tensors `lts`.
std::optional<dg::partition> find_partition(const GraphDesc& desc,
                                            const std::unordered_map<size_t, LogicalTensor>& lts,
                                            std::string& why) {
  dg::graph graph(dnnl::engine::kind::cpu);
  std::vector<dg::partition> partitions;
  try {
    add_group(graph, desc, lts, 0);
    graph.finalize();
    partitions = graph.get_partitions(dg::partition::policy::fusion);
  } catch (const dnnl::error& e) {
    why = std::string("oneDNN refused the graph: ") + e.what();
    return std::nullopt;
  }
  return group_partition(partitions, desc, 0, why);
}

}  // namespace

std::optional<Prepared> find_generic_partition(const GraphDesc& desc, std::string& why) {
  auto chosen = find_partition(desc, group_tensors(desc, false, 0), why);
  if (!chosen) return std::nullopt;
  return Prepared{std::move(*chosen), 0};
}

std::optional<Compiled> compile_partition(const GraphDesc& desc,
                                          const std::vector<LogicalTensor>& inputs,
                                          const std::vector<LogicalTensor>& outputs,
                                          bool profiled, const Prepared* prepared,
                                          std::string& why) {
  size_t base = prepared ? prepared->base : 0;
  auto ports = inputs;
  ports.insert(ports.end(), outputs.begin(), outputs.end());
  auto lts = group_tensors(desc, profiled, base, ports);
  std::optional<dg::partition> chosen;
  if (prepared)
    chosen = prepared->partition;
  else
    chosen = find_partition(desc, lts, why);
  if (!chosen) return std::nullopt;

  std::vector<LogicalTensor> in_lts, out_lts;
  for (auto id : desc.inputs) in_lts.push_back(lts.at(id));
  for (auto id : desc.outputs) out_lts.push_back(lts.at(id));
  Compiled c;
  std::vector<onednn::Created> created;
  bool constant_inputs = std::any_of(in_lts.begin(), in_lts.end(), [](const LogicalTensor& lt) {
    return lt.get_property_type() == LogicalTensor::property_type::constant;
  });
  bool quantizes = std::any_of(desc.ops.begin(), desc.ops.end(), [](const OpDesc& op) {
    return op.kind == dg::op::kind::Quantize || op.kind == dg::op::kind::Dequantize;
  });
  try {
    auto& engine = cpu_engine();
    std::optional<ConstantCacheOff> off;
    if (quantizes && !constant_inputs) off.emplace();
    created = onednn::primitives_created(
        [&] { c.partition = chosen->compile(in_lts, out_lts, engine); });
    if (off) ++counters().uncached_constant_compiles;
  } catch (const dnnl::error& e) {
    why = std::string("oneDNN compile failed: ") + e.what();
    return std::nullopt;
  }
  for (const auto& p : created)
    if (const char* slow = p.slow()) {
      why = std::string("oneDNN would run it with ") + slow + " (" + p.kind + " " +
            p.implementation + "), slower than ATen";
      return std::nullopt;
    }
  c.inputs = std::move(in_lts);
  for (auto id : desc.outputs) c.outputs.push_back(c.partition.query_logical_tensor(id + base));
  return c;
}

namespace {

std::mutex g_shared_mu;
std::unordered_map<std::string, std::weak_ptr<const Compiled>> g_shared;
size_t g_shared_swept = 64;  // the map's size after its last sweep of expired entries

void append(std::string& key, int64_t value) {
  key.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void append(std::string& key, const LogicalTensor& lt) {
  append(key, static_cast<int64_t>(lt.get_data_type()));
  append(key, static_cast<int64_t>(lt.get_property_type()));
  auto layout = lt.get_layout_type();
  append(key, static_cast<int64_t>(layout));
  auto dims = lt.get_dims();
  append(key, static_cast<int64_t>(dims.size()));
  for (auto d : dims) append(key, d);
  if (layout == LogicalTensor::layout_type::strided)
    for (auto s : lt.get_strides()) append(key, s);
}

}  // namespace

std::string shared_compile_key(const std::string& canonical,
                               const std::vector<LogicalTensor>& inputs,
                               const std::vector<LogicalTensor>& outputs, bool profiled) {
  auto key = canonical;
  append(key, profiled);
  for (const auto& lt : inputs) append(key, lt);
  append(key, -1);
  for (const auto& lt : outputs) append(key, lt);
  return key;
}

std::shared_ptr<const Compiled> find_shared_compile(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_shared_mu);
  auto it = g_shared.find(key);
  return it == g_shared.end() ? nullptr : it->second.lock();
}

void add_shared_compile(const std::string& key, const std::shared_ptr<const Compiled>& compiled) {
  std::lock_guard<std::mutex> lock(g_shared_mu);
  g_shared[key] = compiled;
  if (g_shared.size() < 2 * g_shared_swept) return;
  for (auto it = g_shared.begin(); it != g_shared.end();)
    it = it->second.expired() ? g_shared.erase(it) : std::next(it);
  g_shared_swept = std::max<size_t>(g_shared.size(), 64);
}

}  // namespace graphfuse
