"""Benchmark drivers: run the simulator over seeds and traces and write JSON and plots."""
