"""Helpers for testing and benchmarking torch_graphfuse: reference models
written in plain torch.nn, and ways to run a model through the fuser."""
