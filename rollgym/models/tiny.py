"""The default model, made locally with no network: a BPE tokenizer and a tiny Qwen2 LM.

No model hub is reachable on the machines rollgym is developed on, so the built-in default is
built from scratch:

* a byte-level BPE tokenizer trained with ``tokenizers`` on a deterministic synthetic corpus
  (the reference environments' dialogue, Python, shell and plain English), digits split one
  per token (as Qwen2 does), with a ChatML chat template that also renders tools;
* a Qwen2-architecture causal LM (about 3M parameters) with seeded random weights.

Both are saved with ``save_pretrained``, so vLLM, transformers and TRL load the directory like
any Hugging Face checkpoint. The same spec and seed give byte-identical files.

Example::

    from rollgym.models.tiny import ModelSpec, build_model
    build_model(ModelSpec(seed=0), "/tmp/tiny")     # -> Path("/tmp/tiny")
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
SPEC_FILE = "rollgym-model.json"

# ChatML, as Qwen2 uses it. Tools (OpenAI function format) are listed in the system turn and
# the model calls one by writing <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    '# Tools\nCall a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.\n'
    "<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools><|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if not (tools and loop.first and message['role'] == 'system') %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{% if message.get('tool_calls') %}{% for call in message['tool_calls'] %}"
    "\n<tool_call>{{ call['function'] | tojson }}</tool_call>{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Everything that determines the default model; the same spec gives the same bytes."""

    seed: int = 0
    vocab_size: int = 1024
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    corpus_lines: int = 20_000

    @classmethod
    def smallest(cls, **changes: int) -> ModelSpec:
        """One layer, 64 wide, a small tokenizer corpus: the smallest spec vLLM's CPU
        attention takes, built in seconds (tests and smoke runs)."""
        return cls(
            **{
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "corpus_lines": 2000,
                **changes,
            }
        )

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        head_dim = self.hidden_size // self.num_attention_heads
        if head_dim not in (32, 64, 80, 96, 112, 128, 256):
            raise ValueError(f"head dim {head_dim} is not one vLLM's CPU attention supports")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.vocab_size < 512:
            raise ValueError("vocab_size must be >= 512 (256 bytes + merges + specials)")

    def fingerprint(self) -> str:
        return hashlib.sha256(
            json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        ).hexdigest()[:16]


# --- corpus -------------------------------------------------------------------------------

_WORDS = [
    "the",
    "a",
    "an",
    "is",
    "are",
    "was",
    "to",
    "of",
    "and",
    "in",
    "on",
    "for",
    "with",
    "that",
    "this",
    "it",
    "you",
    "your",
    "guess",
    "number",
    "higher",
    "lower",
    "correct",
    "too",
    "high",
    "low",
    "try",
    "again",
    "find",
    "hidden",
    "between",
    "write",
    "function",
    "return",
    "test",
    "tests",
    "passed",
    "failed",
    "file",
    "files",
    "directory",
    "create",
    "remove",
    "move",
    "copy",
    "list",
    "print",
    "value",
    "result",
    "error",
    "output",
    "input",
    "command",
    "shell",
    "python",
    "code",
    "answer",
    "tool",
    "call",
    "name",
    "arguments",
    "calculator",
    "read",
    "write",
    "path",
    "content",
    "line",
    "lines",
    "count",
    "sum",
    "sort",
    "reverse",
    "string",
    "integer",
]

_SNIPPETS = (
    "def solve(x):\n    return x + 1\n",
    "for i in range(10):\n    print(i)\n",
    "import os\nprint(os.listdir('.'))\n",
    "```python\nprint(sum([1, 2, 3]))\n```",
    "```bash\nls -la /work && cat notes.txt\n```",
    "mkdir -p out && echo hello > out/a.txt",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>',
    'if __name__ == "__main__":\n    main()\n',
    "assert f(2) == 4, 'f(2) should be 4'\n",
    "grep -rn TODO . | sort | uniq -c",
)


def synthetic_corpus(rng: random.Random, lines: int) -> Iterator[str]:
    """Deterministic training text for the tokenizer, shaped like the reference tasks."""
    for i in range(lines):
        kind = i % 4
        if kind == 0:
            guess, low, high = rng.randint(1, 1000), rng.randint(1, 500), rng.randint(500, 1000)
            yield f"Guess a number between {low} and {high}. {guess} is {rng.choice(['higher', 'lower', 'correct'])}."
        elif kind == 1:
            yield rng.choice(_SNIPPETS)
        else:
            yield " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16)))


# --- tokenizer ----------------------------------------------------------------------------


def build_tokenizer(spec: ModelSpec):  # type: ignore[no-untyped-def]  # transformers type
    """A byte-level BPE ``PreTrainedTokenizerFast`` with ChatML specials and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = list(synthetic_corpus(random.Random(spec.seed), spec.corpus_lines))
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=spec.max_position_embeddings,
    )


# --- model --------------------------------------------------------------------------------


def build_model(spec: ModelSpec, out_dir: str | Path) -> Path:
    """Build tokenizer and model for ``spec`` and save both into ``out_dir``.

    Written into a temporary sibling and renamed at the end: an interrupted build leaves no
    half-made model behind.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a 13 MB save needs no progress bar in set-up logs

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec)
    vocab = -(-len(tokenizer) // 64) * 64  # round up: friendlier shapes for the kernels
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)

    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tokenizer.save_pretrained(staging)
        model.save_pretrained(staging, safe_serialization=True)
        (staging / SPEC_FILE).write_text(
            json.dumps(
                {"spec": dataclasses.asdict(spec), "fingerprint": spec.fingerprint()}, indent=2
            )
        )
        staging.chmod(0o755)
        for path in staging.iterdir():
            path.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def is_built(spec: ModelSpec, out_dir: str | Path) -> bool:
    """True when ``out_dir`` holds a complete model made from exactly ``spec``."""
    stamp = Path(out_dir) / SPEC_FILE
    try:
        return json.loads(stamp.read_text())["fingerprint"] == spec.fingerprint()
    except (OSError, ValueError, KeyError):
        return False


def count_parameters(model_dir: str | Path) -> int:
    """Parameters stored in ``model_dir`` (tied embeddings counted once)."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(Path(model_dir) / "model.safetensors"), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118  # safe_open has keys() and no __iter__
            shape = f.get_slice(name).get_shape()
            total += math.prod(shape)
    return total
