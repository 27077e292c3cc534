"""cuDNN execution plans for the IR's groups: chosen, cached in memory, kept on disk.

    key       what a plan is valid for (PlanKey), and the precision that picks its engines
    store     serialized plans on disk (PlanStore): entries with a header and checksum
    cache     plans in memory per device (PlanCache), backed by the store
    compiler  plans made by cuDNN (CudnnCompiler): heuristics, or autotuning

A plan is chosen by cuDNN's heuristics (mode A, then FALLBACK: the first plan of
that list that builds) or, with TORCH_GRAPHFUSE_CUDNN_AUTOTUNE=1, by timing the
first plans of that list on the device. Choosing is the slow part of a group's
first run, so plans are kept in memory, per device, for the life of the process,
and on disk under TORCH_GRAPHFUSE_CACHE_DIR (default ~/.cache/torch_graphfuse/cudnn),
so a second process starts without choosing again.

Precision follows eager: engines that down-convert their inputs are never chosen,
and an fp32 group runs on tensor cores (TF32) only where eager would.

Everything about keys, entries and the caches is plain Python over bytes and is
tested on CPU with fake plans; only the compiler talks to cuDNN. Every module
logs as `plans` (PYTORCH_JIT_LOG_LEVEL=plans).
"""
