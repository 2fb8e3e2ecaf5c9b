"""gpuwatch: a GPU health daemon for AMD training machines."""

__version__ = "0.1.0"
