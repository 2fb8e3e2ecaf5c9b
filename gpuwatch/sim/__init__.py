"""The simulated Navi 10 (the kernel's side) for ``gpuwatch run --simulate``, the tests and the benchmarks.

cards: the simulated cards and the source that steps them; physics: the thermal model (pure);
navi10: the card's sysfs files; tree: the real-topology fake sysfs builder. Imports nothing.
"""
