"""The simulated world for `gpuwatch run --simulate`, the tests and the benchmarks: Navi 10 cards, processes, resets."""
