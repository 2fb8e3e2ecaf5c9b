"""Act on training runs: observe each trainer, step its pure state machine, carry out what it decides.
Imports nothing, so importing ``gpuwatch.supervise.policy`` never pulls in the process code.
"""
