"""Fan control: the curve (pure), the per-tick rules (pure), the pwm1 and gpu_od backends behind one
FanBackend Protocol, the controller the daemon runs, and the fans' part of `gpuwatch restore`.
Imports nothing, so importing ``gpuwatch.fan.curve`` never pulls in the controller.
"""
