"""The CUDA backend: cuDNN graph API fusions (a conv or matmul anchor with a
pointwise prologue and epilogue, at most one reduction at the end).

    op_table     aten op -> op class (anchor, pointwise, reduction, complicated) and IR lowering
    partition    the plugin's own partitioner (cuDNN does not partition)
    lower        a partition's nodes -> ir.Graph
    ir           the plain-data IR each group stores, prints and compiles
    interpreter  runs any IR on CPU tensors: the lowering's semantics checked without a GPU
    builder      ir.Graph -> cuDNN frontend graph
    plans        heuristics, autotuning, in-memory and on-disk plan caches
    runtime      the executor the FusionGroup kernel calls per run
    simulation   the whole path on CPU with the interpreter as executor (tests)

Nothing here imports `cudnn` (the optional `cuda` extra) until a graph is built.
"""
