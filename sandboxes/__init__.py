"""Hardened Docker sandboxes: a warm pool of boxes and a fast in-box executor.

Environments see only ``sandboxes.base.Sandbox`` (run shell/Python, files, checks, reset);
the pool owns the boxes' lives. Agent code runs under a user of its own; the executor,
its sockets and the verifier stay out of its reach (``sandboxes/agent/identity.py``).
See ``sandboxes/base.py`` for the interface and the error tree, ``sandboxes/config.py``
for the settings, ``sandboxes/metrics.py`` for the metric names, and
``tests/docker/attacks/`` for the boundaries tried as a hostile agent would.

    from rollgym.sandboxes.base import WORK_DIR, SandboxDied, SandboxTimeout
    from rollgym.sandboxes.config import PoolConfig, SandboxConfig
    from rollgym.sandboxes.docker import DockerSandboxPool  # unit tests: sandboxes.fake.FakeSandboxPool

    config = PoolConfig(size=8, box=SandboxConfig(memory_mb=256, command_timeout_s=10))
    with DockerSandboxPool(config) as pool:                  # starts 8 boxes in parallel
        with pool.sandbox(timeout=30) as box:                # reset when it goes back
            box.write_file(f"{WORK_DIR}/task.py", "print(6 * 7)")
            box.run_shell("python3 task.py").stdout          # '42\\n'
            box.run_python("x = 6"); box.run_python("x * 7")  # one namespace: '42\\n'
            try:
                box.run_shell("sleep 60", timeout=1)
            except SandboxTimeout as exc:                    # killed; the box stays usable
                exc.result.stdout
    # AgentFault (SandboxTimeout, SandboxOOM) is the agent's doing: the box lives on, a task
    # failure. SandboxDied is the infrastructure's: mark the episode invalid.

Async code: ``async with pool.asandbox() as box: await box.arun_shell(...)``. Metrics:
pass ``metrics=MetricsRecorder()`` (or any ``MetricsSink``) to the pool. Boxes of many
images (tasks that bring their own, such as Harbor tasks) come from one
``image_pool.ImagePool`` under one cap (``docker.DockerImagePool``); a task's own tests run
as the verifier once the agent is gone through ``Sandbox.grade``.
"""

if __name__ != "rollgym.sandboxes":  # this folder is that subpackage (pyproject's package-dir)
    raise ImportError(f"import rollgym.sandboxes, not {__name__}: one module, one name")
