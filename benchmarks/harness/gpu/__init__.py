"""The GPU benchmark's parts, for gpu_bench.py: configurations, peers, timing and the report."""
