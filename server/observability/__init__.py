"""Observing the server: what it measures and where it shows it.

observed.py    ObservedEngine: every generation handed to observers (metrics, the
               dashboard, the cost board)
"""
