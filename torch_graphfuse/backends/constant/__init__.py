"""Any device: the tensors a graph computes from sizes and constants alone, computed once per
input spec.

Hugging Face builds its attention masks, position ids, rotary tables and relative-position
buckets on every call, from `x.size(1)` and `torch.arange`, in dozens of small ops on int64
and bool tensors that no kernel library takes. Their values are a function of the input
sizes: a group of them runs them once, at the profiled sizes, keeps the results as constants,
and returns those while its guard holds (exact sizes, strides, dtypes and devices of the
tensors whose sizes they read); any other call runs the ops.

    backend     the backend as the pipeline sees it: any device, this partitioner
    partition   which nodes compute from sizes and constants alone, in groups, and their values
"""

from ...group_schema import CONSTANT

BACKEND = CONSTANT  # its groups' `backend`: csrc/constant_kernel.cpp returns the values
OFFERED_BY = "size constants"
