"""Sense: which processes use which GPU (DRM fdinfo per process, KFD for ROCm), from an injected /proc."""
