"""TRL's fused LM head with rollgym's CPU vocabulary chunk (trainer.lm_head_chunk): the
same log-probabilities as whole logits, and the setting TRL reads."""

from __future__ import annotations

import torch
import trl.trainer.utils as trl_utils
from trl.kernels import ChunkedLogProbFunction

from rollgym.trainer.lm_head_chunk import CPU_VOCAB_CHUNK, TRL_CHUNK_SETTING, use_cpu_chunk


def test_chunks_of_the_vocabulary_give_the_whole_logits_log_probabilities() -> None:
    torch.manual_seed(0)
    hidden, weight = torch.randn(12, 16), torch.randn(3 * CPU_VOCAB_CHUNK + 5, 16)
    targets = torch.randint(0, weight.size(0), (12,))
    logps, entropy, *_ = ChunkedLogProbFunction.apply(
        hidden, weight, None, targets, 1.0, CPU_VOCAB_CHUNK, None, 1.0, ("entropy",)
    )
    whole = torch.log_softmax(hidden @ weight.T, dim=-1)
    torch.testing.assert_close(logps, whole.gather(1, targets[:, None])[:, 0])
    torch.testing.assert_close(entropy, -(whole.exp() * whole).sum(-1))


def test_a_cpu_trainer_sets_trls_chunk_and_a_gpu_one_leaves_it(monkeypatch) -> None:
    monkeypatch.setattr(trl_utils, TRL_CHUNK_SETTING, 32768)  # TRL's, restored after the test
    use_cpu_chunk(torch.device("cuda"))
    assert getattr(trl_utils, TRL_CHUNK_SETTING) == 32768
    use_cpu_chunk(torch.device("cpu"))
    assert getattr(trl_utils, TRL_CHUNK_SETTING) == CPU_VOCAB_CHUNK
