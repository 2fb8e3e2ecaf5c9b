"""The training side of a pause: step hooks, heartbeat, and the job-wide agreement of a distributed job's ranks.

Imports nothing, like every subpackage's ``__init__``: import a module (``pause.hooks``...) by its name.
"""
