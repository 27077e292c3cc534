"""The benchmark drivers' shared machinery: child processes, plots, text and both devices' parts."""
