"""Act on training runs: the supervisor's pure state machine (policy), its effects (supervisor), one
training command's process tree (process) and the checkpoint check. Imports nothing.
"""
