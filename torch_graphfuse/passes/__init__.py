"""The backend-agnostic JIT passes and analyses the partitioners start from, one per module,
in pipeline order (see ../pipeline.py)."""
