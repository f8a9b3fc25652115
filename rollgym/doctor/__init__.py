"""``rollgym doctor MODEL [ENV]``: the silent failures that waste a run, checked before it.

A run can train for hours on data it should not: contexts the model is never served
(a chat template that renders earlier turns differently), tool calls the envs cannot parse,
episodes the context cuts short, sandboxes that fail every reset, an engine whose
logprobs the trainer does not reproduce (every importance ratio off from step one). Each
of these shows only as a run that does not learn. The doctor checks them in a minute:

================================  ========================================================
chat template keeps the token     the server's incremental context == the whole
prefix                            conversation rendered, at every turn (``checks``)
tool calls round-trip             a call the template renders parses back with the envs'
                                  parser (skipped when the env has no tools)
context fits max turns x max      opening + turns x (max tokens + the env's reply) within
tokens                            max_model_len (skipped without an env)
env plays                         the env resets and steps with its real replies
sandbox image and pool answer     the image is there, a pool starts, a box answers
                                  (skipped for an env without a sandbox)
trainer and server logprobs       transformers and vLLM on probe prompts, in this process
agree                             (``--no-logprobs`` skips it)
================================  ========================================================

``report.doctor(DoctorConfig(...))`` returns the ``Report``; ``report.preflight`` prints
its table and raises ``DoctorFailed`` (this package's one error) when a check fails, the
one call a pipeline makes before it starts; ``report.before_run`` is that call for
``rollgym run``, which makes it first (``--no-doctor`` skips it; docs/training.md).
``commands`` is the CLI. Nothing is imported here, so ``rollgym --help`` stays instant.
"""
