"""Every write that changes the hardware: the actuators' restore files and workers (actuator.py) and the held,
verified setting the caps and the clock share (setting.py)."""
