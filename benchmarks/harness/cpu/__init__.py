"""The CPU benchmark's parts, for bench.py and zoo.py: peers, timing, ceilings and the report."""
