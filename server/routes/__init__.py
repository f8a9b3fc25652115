"""HTTP routes, one router per area: ``agents`` (health, metrics, policy, sessions),
``openai`` (OpenAI-compatible generation), ``admin`` (token-protected: weights, rollouts,
buffer). Routes are thin: they validate, call a service from ``app.state``, and answer."""
