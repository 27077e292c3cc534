"""The JIT passes of torch_graphfuse, one per module, in pipeline order (see ../pipeline.py)."""
