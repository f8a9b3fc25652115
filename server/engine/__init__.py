"""Engines behind ``server.policy.PolicyEngine``: vLLM's (``vllm_engine``), a fake for unit
tests (``fake``), and a metering wrapper that records every generation (``metered``)."""
