"""Gymnasium environments for multi-turn text agents, registered as ``rollgym/<Name>-v0``."""
