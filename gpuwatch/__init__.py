"""gpuwatch: a GPU health daemon for AMD training machines.

Sense (gpus, procs, resets) -> decide and act (fan, power, supervise) -> publish, wired by daemon and faced by
cli; sim is the simulated hardware only those two use, train the optional torch extra; under all of them the
leaves config, model, sysfs, procfs, limits, heartbeat, actuation, deadline. docs/architecture.md is the map.
"""

__version__ = "0.1.0"
