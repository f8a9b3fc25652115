"""vLLM in-process: ``engine.VLLMEngine`` (the ``ServingEngine`` on vLLM's ``AsyncLLM``), the
worker extension it loads into vLLM's workers (``worker_ext``, with ``staging``: new weights
loaded beside the served ones), and n-gram speculative decoding under a gate
(``speculation``). Nothing here is imported until an engine is made."""
