"""Weight updates: check new weights against the served model, then swap them in.

``safetensors_check`` reads and checks safetensors headers (and then the values) without
loading tensors; ``receive`` streams an upload to disk; ``store.PolicyStore`` keeps the
last applied weights and their version for a restart; ``updater.WeightUpdater`` runs one
update at a time, checked before the engine (a ``WeightTarget``) is asked to swap.
"""
