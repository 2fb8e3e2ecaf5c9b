"""Sense: every source of GPU readings and the sampler that freezes them into one Snapshot per tick."""
