"""Hardened Docker sandboxes: a warm pool of boxes and a fast in-box executor.

Environments see only ``sandboxes.base.Sandbox`` (run shell/Python, files, reset); the pool
owns the boxes' lives. See ``sandboxes/base.py`` for the interface and the error tree,
``sandboxes/config.py`` for the settings, ``sandboxes/metrics.py`` for the metric names.

    from sandboxes.base import WORK_DIR, SandboxTimeout
    from sandboxes.config import PoolConfig, SandboxConfig
    from sandboxes.docker import DockerSandboxPool  # unit tests: sandboxes.fake.FakeSandboxPool

    config = PoolConfig(size=8, box=SandboxConfig(memory_mb=256, command_timeout_s=10))
    with DockerSandboxPool(config) as pool:            # starts 8 boxes in parallel
        with pool.sandbox(timeout=30) as box:          # reset when it goes back
            box.write_file(f"{WORK_DIR}/task.py", "print(6 * 7)")
            print(box.run_shell("python3 task.py").stdout)    # '42\\n'
            box.run_python("x = 1"); box.run_python("x + 1")  # one namespace per episode

Async code uses ``async with pool.asandbox() as box: await box.arun_shell(...)``.
"""
