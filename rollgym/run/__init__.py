"""The built-in run (``rollgym run``): an application on top of the packages.

It warm-starts the preset's model on demonstrations of its task (``warmstart``), starts the
rollout server as a child process (``server_process``), trains with the trainer library
against it, evaluates, and draws the report (``plot``); ``pipeline.run_default`` ties the
steps together and resumes an interrupted run.
"""
