"""Act on the shader clock's ceiling (an actuator): the rung between the power cap's floor and the pause."""
