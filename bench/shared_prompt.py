"""The GRPO loss's forward and backward: each distinct prompt once vs every row whole.

    .venv/bin/python -m bench.shared_prompt [--repeats 3] [--device cuda] [--random-weights]
                                            [--shape MODEL:4x8x230x190 ...]

``trainer.shared_prompt`` computes a group's prompt once and lets every sample's completion
read its KV cache; TRL's forward runs every row whole (the baseline, in the same run). Each
row of the table is a batch shaped like a training step's: ``prompts x samples`` rows, a
prompt (one of them left-padded) and completions of mixed lengths, random tokens, TRL's
fused LM head, float32, the trainer's threads (all cores). Timed: forward, a loss over the
completion tokens, backward; the median of ``--repeats`` after one untimed. Also printed:
the largest difference between the two ways' logprobs. The default model at
GuessTool's shape (``bench.peers``' task until 2026-12-07: a 230-token prompt with its tool schema, up to 190
tokens sampled and replied, 4 groups of 8); SmolLM2-135M, when pulled, at a smaller one.
``--device cuda`` times it on a GPU (the trainer's side of a GPU host); ``--random-weights``
builds each model from its ``config.json`` alone, with random weights (the timings do not
depend on the values), for a host that has the configuration but not the checkpoint.
``--shape`` (repeatable) times other batches: prompts x samples x prompt tokens x completion
tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench import quiet_training_output

SHAPES = (  # (model, prompts, samples per prompt, prompt tokens, completion tokens)
    ("default", 4, 8, 230, 190),
    ("smollm2-135m-instruct", 2, 4, 230, 64),
)


def parse_shape(text: str) -> tuple[str, int, int, int, int]:
    """``MODEL:PxSxPROMPTxCOMPLETION`` as a ``SHAPES`` row.

    >>> parse_shape("default:4x8x230x190")
    ('default', 4, 8, 230, 190)
    """
    name, _, dims = text.partition(":")
    prompts, samples, prompt, completion = (int(d) for d in dims.split("x"))
    return name, prompts, samples, prompt, completion


def model_dir(name: str, *, config_only: bool = False) -> Path | None:
    """Where the model ``name`` is; None if it is not pulled (or, with ``config_only``, if
    not even its ``config.json`` is there)."""
    from rollgym.contract import paths
    from rollgym.models.catalog import CATALOG
    from rollgym.models.pull import is_pulled

    if name == "default":
        return paths.default_model_dir()
    path = paths.models_dir() / name
    if config_only:
        return path if (path / "config.json").is_file() else None
    return path if is_pulled(CATALOG[name], path) else None


def batch(vocab: int, prompts: int, samples: int, prompt: int, completion: int) -> tuple:
    """Input ids, attention mask and completion mask of ``prompts x samples`` rows."""
    import torch

    generator = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(3, vocab, (prompts, prompt), generator=generator)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[0, :10] = 0  # a shorter prompt, left-padded as TRL pads
    rows = prompts * samples
    lengths = torch.randint(completion // 3, completion + 1, (rows,), generator=generator)
    completion_mask = (torch.arange(completion)[None] < lengths[:, None]).long()
    ids = torch.cat(
        [
            prompt_ids.repeat_interleave(samples, 0),
            torch.randint(3, vocab, (rows, completion), generator=generator),
        ],
        1,
    )
    mask = torch.cat([prompt_mask.repeat_interleave(samples, 0), completion_mask], 1)
    return ids, mask, completion_mask


def timed(model: Any, forward: Any, completion_mask: Any, repeats: int) -> tuple[float, Any]:
    """Median seconds of forward + backward, and the logprobs of the last run."""
    import torch

    wait = torch.cuda.synchronize if completion_mask.is_cuda else lambda: None
    times = []
    for _ in range(repeats + 1):
        model.zero_grad()
        wait()
        started = time.perf_counter()
        logps = forward()
        (logps * completion_mask).sum().backward()
        wait()  # CUDA runs the kernels after the call returns
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:]), logps.detach()


def measure(
    path: Path, shape: tuple[int, int, int, int], repeats: int, *, device: str, random: bool
) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from rollgym.trainer.shared_prompt import LENGTH_BUCKETS, shared_prompt_forward

    if random:
        config = AutoConfig.from_pretrained(path)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    model.to(device).train()
    completion = shape[3]
    ids, mask, completion_mask = (t.to(device) for t in batch(model.config.vocab_size, *shape))

    def whole_rows() -> Any:
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-completion] = -100
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        return out.log_probs[:, -completion:]

    def shared(buckets: int) -> Any:
        return lambda: (
            shared_prompt_forward(model, ids, mask, completion, buckets=buckets).log_probs
        )

    whole_s, whole_logps = timed(model, whole_rows, completion_mask, repeats)
    one_pass_s, one_pass_logps = timed(model, shared(1), completion_mask, repeats)
    shared_s, shared_logps = timed(model, shared(LENGTH_BUCKETS), completion_mask, repeats)
    scored = completion_mask.bool()
    return {
        "whole_s": whole_s,
        "one_pass_s": one_pass_s,
        "shared_s": shared_s,
        "max_diff": max(
            float((whole_logps[scored] - logps[scored]).abs().max())
            for logps in (one_pass_logps, shared_logps)
        ),
    }


def main() -> None:
    import torch

    from rollgym.trainer.shared_prompt import LENGTH_BUCKETS

    quiet_training_output()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU host")
    parser.add_argument(
        "--random-weights", action="store_true", help="each model from its config.json alone"
    )
    parser.add_argument(
        "--shape",
        action="append",
        type=parse_shape,
        help="MODEL:PROMPTSxSAMPLESxPROMPT_TOKENSxCOMPLETION_TOKENS, instead of the defaults",
    )
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    print(
        f"{'model':<24}{'batch':>8}{'prompt':>8}{'sampled':>9}{'whole rows':>12}"
        f"{'shared, 1 pass':>16}{'by length':>11}{'speed-up':>10}{'max |dlogp|':>13}"
    )
    for name, *shape in args.shape or SHAPES:
        path = model_dir(name, config_only=args.random_weights)
        if path is None:
            print(f"{name:<24}not pulled (rollgym model pull {name})")
            continue
        prompts, samples, prompt, completion = shape
        row = measure(
            path,
            (prompts, samples, prompt, completion),
            args.repeats,
            device=args.device,
            random=args.random_weights,
        )
        print(
            f"{name:<24}{f'{prompts}x{samples}':>8}{prompt:>8}{completion:>9}"
            f"{row['whole_s']:>11.3f}s{row['one_pass_s']:>15.3f}s{row['shared_s']:>10.3f}s"
            f"{row['whole_s'] / row['shared_s']:>9.2f}x{row['max_diff']:>13.1e}"
        )
    print(
        f"forward + backward, median of {args.repeats}; {_where(args.device)}, float32; "
        f"by length: the completions in up to {LENGTH_BUCKETS} passes of rows of similar length; "
        "speed-up: whole rows over by length"
    )


def _where(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(device)
    return f"{os.cpu_count()} cores"


if __name__ == "__main__":
    main()
