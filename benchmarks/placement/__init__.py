"""Placement benchmark on real Kueue (``python -m benchmarks.placement``): see :mod:`.run`."""
