"""gpuwatch: a GPU health daemon for AMD training machines.

Sense (gpus, procs, resets) -> decide and act, rung by rung (fan, power, clock, then supervise: the training runs,
then the processes not run under gpuwatch) -> publish, wired by daemon and faced by cli (its two programs of
their own: cli/train, the wrapper; cli/health, the scheduler gate); sim is the simulated hardware only those two
use, train the optional torch extra; under all of them the leaves model, config, sysfs, procfs, safefs, limits,
heartbeat, attach, connect, deadline and actuation (the one way to change the hardware). docs/architecture.md is
the map.
"""

__version__ = "0.1.0"
