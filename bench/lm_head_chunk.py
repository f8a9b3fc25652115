"""TRL's fused LM head on a CPU: its vocabulary chunk (32,768) against rollgym's (2,048).

    .venv/bin/python -m bench.lm_head_chunk [--runs 3] [--tokens 816,4096]

SmolLM2-135M's head (576 wide, 49,152 tokens of vocabulary, random weights) scores
``--tokens`` tokens with ``trl.kernels.ChunkedLogProbFunction`` (log-probabilities and
entropy, as the GRPO loss asks), forward and backward, on one thread; each chunk size in a
fresh process of its own, so its peak memory is its own. 816 tokens is a ``bench.lora``
SmolLM2 batch (8 rows), 4,096 a GuessTool ``bench.peers`` one. Rows: the median time of 5 passes
after a warm-up; the process's peak memory above what it held before the first pass (the
head's weight and its gradient included, the same in both); the largest difference of a
log-probability from TRL's chunk. Each cell: the median over ``--runs`` with min-max.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from bench.lora import spread
from bench.server import print_table

TRL_CHUNK = 32768
VOCAB, WIDTH = 49152, 576


def one(chunk: int, tokens: int) -> dict[str, object]:
    """This process: time and peak memory of ``chunk``'s forward and backward."""
    import resource
    import statistics
    import time

    import torch
    from trl.kernels import ChunkedLogProbFunction

    torch.set_num_threads(1)
    torch.manual_seed(0)
    hidden = torch.randn(tokens, WIDTH, requires_grad=True)
    weight = (torch.randn(VOCAB, WIDTH) * 0.02).requires_grad_()
    targets = torch.randint(0, VOCAB, (tokens,))

    def step() -> torch.Tensor:
        logps, entropy, *_ = ChunkedLogProbFunction.apply(
            hidden, weight, None, targets, 1.0, chunk, None, 1.0, ("entropy",)
        )
        (logps.sum() + 0.01 * entropy.sum()).backward()
        hidden.grad = weight.grad = None
        return logps.detach()

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    logps = step()
    times = []
    for _ in range(5):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "s": statistics.median(times),
        "peak_mib": (peak - before) / 1024,
        "logps": logps[:256].tolist(),
    }


def in_child(chunk: int, tokens: int) -> dict:
    command = [sys.executable, "-m", "bench.lm_head_chunk", "--child", f"{chunk}:{tokens}"]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", default="816,4096")
    parser.add_argument("--chunk", type=int, default=None, help="rollgym's (default: its own)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        chunk, tokens = map(int, args.child.split(":"))
        print(json.dumps(one(chunk, tokens)))
        return
    from rollgym.trainer.lm_head_chunk import CPU_VOCAB_CHUNK

    ours = args.chunk or CPU_VOCAB_CHUNK
    rows = []
    for tokens in map(int, args.tokens.split(",")):
        runs = [(in_child(TRL_CHUNK, tokens), in_child(ours, tokens)) for _ in range(args.runs)]
        gap = [
            max(abs(a - b) for a, b in zip(t["logps"], o["logps"], strict=True)) for t, o in runs
        ]
        speedup = [t["s"] / o["s"] for t, o in runs]
        saved = [t["peak_mib"] - o["peak_mib"] for t, o in runs]
        rows += [
            (str(tokens), "forward + backward (s)", spread([t["s"] for t, _ in runs], ".2f"),
             spread([o["s"] for _, o in runs], ".2f"), spread(speedup, ".2f") + "x faster"),
            (str(tokens), "peak memory added (MiB)", spread([t["peak_mib"] for t, _ in runs], ".0f"),
             spread([o["peak_mib"] for _, o in runs], ".0f"), spread(saved, ".0f") + " MiB less"),
            (str(tokens), "largest logprob difference", "-", f"{max(gap):.1e}", ""),
        ]  # fmt: skip
    print_table(rows, ("tokens", "row", f"TRL's chunk ({TRL_CHUNK})", f"rollgym's ({ours})", ""))


if __name__ == "__main__":
    main()
