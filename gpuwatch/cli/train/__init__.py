"""`gpuwatch train`: the wrapper that runs a training command as its parent, attached to the daemon."""
