"""The engine floor: vLLM in-process, its weight updates, and what they need; no HTTP.

A floor under the rollout server (``rollgym.server``, the HTTP application): nothing here
imports the server (``tests/unit/test_layout.py`` checks), so the engine runs and is tested
on its own (``rollgym eval``, the benchmarks). Its errors have one root
(``errors.EngineError``) that the server's one handler maps to HTTP; it reports to a
metrics sink (``metrics.MetricsSink``), as the sandboxes do.

    base.py        the seams: PolicyEngine (token ids in; ids, logprobs and the version
                   out), WeightTarget (swap in checked weights), ServingEngine (both, with
                   a life)
    config.py      EngineConfig, SpeculationConfig, WeightCheckConfig
    fake.py        FakeEngine: a scripted policy for unit tests (its twin: vllm.engine)
    vllm/          VLLMEngine (vLLM's AsyncLLM in-process), the worker extension that loads
                   weights beside the served ones (staging), speculative decoding under a
                   gate (speculation)
    weights/       safetensors checks, the upload receiver, the policy store (the last
                   applied weights and version), WeightUpdater (one checked update at a time)
    precision.py   no lower precision than training's without the red line's verdict
    durable.py     small files written so that a crash leaves the old or the new
    errors.py      the error tree; metrics.py: the metric names and the sink protocol
"""

if __name__ != "rollgym.engine":  # this folder is that subpackage (pyproject's package-dir)
    raise ImportError(f"import rollgym.engine, not {__name__}: one module, one name")
