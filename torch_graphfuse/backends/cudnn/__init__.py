"""The CUDA backend: groups of a convolution or matmul anchor with a pointwise prologue and
epilogue and at most one final reduction, lowered to a plain-data IR and run by cuDNN's
graph API.

    backend        the backend as the pipeline sees it: CUDA regions, the plugin's partitioner
    frontend       the cuDNN frontend module (the optional `cuda` extra), loaded on first use
    ir             the IR each group stores, prints and compiles, and its one vocabulary of
                   pointwise and reduction modes
    lowering       what an op-table entry works with (the Lowering context)
    op_table       aten op -> op class (anchor, pointwise, reduction) and its lowering
    group_rules    a group's nodes -> ir.Graph, under cuDNN's group rules
    partition      the plugin's own partitioner (cuDNN does not partition)
    interpreter    runs any IR on CPU tensors: the lowering's semantics checked without a GPU
    builder        ir.Graph -> cuDNN frontend graph
    plans          execution plans:
      key          what a plan is valid for, and the precision that picks its engines
      store        serialized plans on disk
      cache        plans in memory, per device
      compiler     plans made by cuDNN: heuristics or autotuning
    runtime        the executor the FusionGroup kernel calls per run
    device_specs   the GPUs targeted, described for cuDNN's deviceless mode
    deviceless     how far cuDNN plans an IR for a described GPU, with none present
    preflight      whether cuDNN groups can run on this machine's stack (the GPU tier's check)

The whole path runs on CPU, the interpreter as executor, under
torch_graphfuse.testing.cudnn_on_cpu (tests). Nothing here imports `cudnn` until a graph is
built.
"""

BACKEND = "cudnn"  # its groups' `backend`: they run through runtime's executor
# Who chose the regions, as the report says it: cuDNN does not partition.
OFFERED_BY = "the cuDNN partitioner"

