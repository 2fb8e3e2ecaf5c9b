"""The MIOpen-free conv2d fallback: the entry point and its Function, plans, paths, autotuning and host code.

Imports nothing, like every subpackage's ``__init__``: import a module (``conv2d.function``,
``conv2d.plan``...) by its name.
"""
