"""The in-box executor: a long-running process that runs an agent's commands.

Standard library only: this folder is copied next to each box and run by the box's own
``python3`` (``python3 -m agent.executor``), or as a host process by the fake sandbox. The
host talks to it over a unix socket with length-prefixed JSON frames (``framing``).
"""
