"""The contracts that the server, the trainer and their clients share, in one place.

This package imports nothing else of rollgym (a test checks it), so every side can depend
on it without pulling in vLLM, Docker or TRL:

* ``api``: the server's HTTP API, each route declared once (method, path, request and answer
  models, query, who may call it), for the server, the router and every client;
* ``wire``: every body that crosses the server's HTTP boundary (trajectories, pulls, rollout
  jobs, weight updates, sessions), as pydantic models; ``openai``: the OpenAI-compatible ones;
* ``shape``: the run's shape (group size, groups per batch, max staleness), declared once for
  the trainer's config, the rollout job and the sessions' window;
* ``dashboard``: what the trainer posts to the dashboard and what the page polls;
  ``cost``: its cost board;
* ``archive``: the archive's pages (trajectories kept for export);
* ``chat``: the OpenAI chat fine-tuning format that exports write and the SFT warm start
  reads;
* ``staleness``: the staleness window's rule and capacity, the only place it is written;
* ``paths``: where rollgym keeps its data (``$ROLLGYM_HOME``); ``precision``: the precision
  red line's verdict;
* ``metrics``: the metrics sink that the boxes and the engine report to.
"""
