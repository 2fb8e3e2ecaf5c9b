"""Report: the views and transports of each tick's PublishedState (state holder and file, JSON
document, Prometheus metrics, HTTP endpoint, systemd STATUS= line). Never touches hardware.
Imports nothing.
"""
