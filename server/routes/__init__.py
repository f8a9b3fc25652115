"""HTTP routes, one router per area: ``agents`` (health, metrics, policy, sessions),
``openai`` (OpenAI-compatible generation), ``admin`` (token-protected: weights, rollouts,
evaluations, buffer), ``archive`` (token: the archive's pages), ``dashboard`` (the page and
its data; the trainer's reports behind the token). Routes are thin: they validate, call a
service from ``app.state`` (``deps``), and answer."""
