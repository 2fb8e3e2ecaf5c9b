"""The power-cap governor, the rung between the fan curve and the pause: the pure control law, the cap
backends (amdgpu hwmon, NVML), the controller the daemon runs, and the restore file for `gpuwatch restore`.
"""
