"""Wire: the long-running process. compose builds the parts from the config, loop ticks them; reload,
sdnotify and control are its side channels. Imports nothing.
"""
