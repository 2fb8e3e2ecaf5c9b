"""gpuwatch: a GPU health daemon for AMD training machines.

Sense (gpus/) -> decide and act (fan/, supervise/) -> publish (publish/), wired by daemon/ and faced
by cli/, over the leaves model, config, sysfs, limits and heartbeat; train/ is the optional torch
extra. docs/architecture.md is the map, tests/test_layering.py enforces it.
"""

__version__ = "0.1.0"
