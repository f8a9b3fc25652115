"""Benchmarks: each compares against a baseline in the same run and prints a table.

Run one with ``.venv/bin/python -m bench.<name>``.
"""
