"""Hardened Docker sandboxes: a warm pool of boxes and a fast in-box executor.

Environments see only ``sandboxes.base.Sandbox`` (run shell/Python, files, reset); the pool
owns the boxes' lives. See ``sandboxes/base.py`` for the interface and the error tree.
"""
