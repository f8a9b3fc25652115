"""The rollout server: vLLM behind FastAPI, weight updates, rollouts, the trajectory buffer.

Importing this package is cheap; the engine (and vLLM) load only when an app is created.
``server.wire`` holds the HTTP schema that clients such as the trainer depend on.
"""
