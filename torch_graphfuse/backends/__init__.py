"""The fusion backends: the protocol each provides, their registry, and one folder each.

    base.py      what a backend provides, and the Partition it hands the shared passes
    registry.py  the registered backends, in the order the pipeline offers them a block
    constant/    any device: the tensors computed from sizes and constants alone, computed
                 once at the profiled sizes and returned while the guard holds
    onednn/      CPU: op table, oneDNN's own partitioning under the plugin's rules, the
                 text description csrc/onednn compiles, layout propagation between groups
    cudnn/       CUDA: op table, the plugin's own partitioner (cuDNN does not partition),
                 the plain-data IR, its CPU reference interpreter, the cuDNN frontend
                 builder, plan caches and the runtime

Adding a backend is one folder with a class of `base.Backend`'s shape, plus one line in
the registry.
"""
