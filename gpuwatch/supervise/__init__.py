"""Decide and act on training runs: start, pause, resume, restart and stop each [[trainer]]'s command."""
