"""On-demand benchmarks (not run by the test suite); see docs/benchmarks.md."""
