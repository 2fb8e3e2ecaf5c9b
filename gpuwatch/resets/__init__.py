"""Sense: GPU resets (devcoredump, WEDGED uevents) and each GPU's way back to usable."""
