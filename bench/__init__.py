"""Side-by-side benchmarks: ``python -m bench`` (see docs/performance.md)."""
