"""The CPU backend: aten ops mapped to oneDNN Graph ops, and oneDNN's partitions of them kept
under the plugin's rules, for csrc/onednn to compile and run.

    backend             the backend as the pipeline sees it
    library             torch's oneDNN: its version and the ISA its kernels use here
    op_table            aten op -> entry (LOWERINGS): the one-to-one and elementwise ops,
                        and the families' modules it loads:
      convolution       convolutions and matrix products
      normalization     batch, layer and group norm, softmax, attention
      pooling           pooling and the mean
      layout            concatenation, transposes, reshapes, copies and casts
      quantization      PT2E's quantize and dequantize
    lowering            what an entry works with (the Lowering context), and the registry
    op_mapping          a JIT block -> its backend graph, node by node through the table
    graph_desc          the backend graph and its text form
    partition           oneDNN's partitions -> the plugin's Partitions
    rules               the policy table (RULES): which partitions stay unfused, and why
    workarounds         oneDNN 3.12's defects, one predicate each, with what was measured
    layout_propagation  group outputs only groups read keep oneDNN's layout
    prepare_partitions  all groups partitioned in one call to oneDNN
"""

from ...group_schema import ONEDNN

BACKEND = ONEDNN  # its groups' `backend`: csrc/onednn's kernel runs them
OFFERED_BY = "oneDNN"  # who chose the regions, as the report says it

