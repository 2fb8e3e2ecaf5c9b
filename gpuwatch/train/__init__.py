"""Optional training patches (imports torch): MIOpen-free Conv2d, spawn-safe DataLoader, step heartbeat.

Install with ``pip install gpuwatch[train]``. The daemon and the CLI never import this package.
"""
