"""Weight updates: check new weights against the served model, then swap them in.

``safetensors_check`` reads and checks safetensors headers without loading tensors;
``updater.WeightUpdater`` stages uploads, enforces one update at a time and the expected
version, and asks the engine (a ``WeightTarget``) to swap.
"""
