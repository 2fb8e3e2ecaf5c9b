"""Sense: every source of GpuReadings (amdgpu sysfs, NVML) and the sampler that turns them into one
frozen Snapshot per tick. Imports nothing.
"""
