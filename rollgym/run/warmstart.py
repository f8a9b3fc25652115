"""Warm start: supervised fine-tuning (TRL's ``SFTTrainer``) on demonstrations of the task.

A model first learns the task's format and an imperfect policy by imitation, leaving RL room
to improve it: the built-in run's SmolLM2 never calls the tool as it comes, and the 3.3M
local model of the ``agent-tiny`` and ``guess`` presets starts from random weights. What the
demonstrations play is the ``demos`` config's (``rollgym.run.demos``): ``Compute`` (the
oracle's tool calls, a share of the answers given without the tool, and for the 3.3M
model generic copies and copy drills first) or GuessNumber.

The demonstrations travel in the data format of ``rollgym generate`` and ``rollgym export``
(OpenAI chat records, ``rollgym.contract.chat``): the built-in ones are converted to it, and
``demonstrations`` adds the records of a ``chat.jsonl`` (say, successful episodes that
``rollgym generate --min-reward 1`` sampled from a stronger model).

Each conversation becomes one pre-tokenized example laid out by the rollout server's own
``ChatCodec`` (``tokenize_conversation``): the opening rendered with the generation prompt
(and the env's tools); then per turn the message's tokens and the end-of-turn token
(trained on, ``assistant_masks`` 1, unless the message has OpenAI's ``weight`` 0), and the
chat template's text up to the next generation prompt (context only, 0). TRL's
``SFTTrainer`` takes such a dataset as is and masks the labels.

The result is an ordinary model directory (weights + tokenizer); a marker file records the
config, so a second call with the same config returns at once (``rollgym run`` resumes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from rollgym.contract.chat import ChatRecord, read_jsonl, template_messages
from rollgym.contract.progress import time_left
from rollgym.run.demos import ComputeDemos, GuessDemos
from rollgym.server.conversation.codec import ChatCodec
from rollgym.trainer.lora import LoraSettings

MARKER_FILE = "rollgym-warmstart.json"
Demos = Annotated[ComputeDemos | GuessDemos, Field(discriminator="kind")]


class WarmStartConfig(BaseModel):
    """The SFT warm start: the demonstrations and the optimisation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    demos: Demos = Field(default_factory=GuessDemos)
    epochs: float = Field(6.0, gt=0)
    learning_rate: float = Field(2e-3, gt=0, description="the conversations' peak (cosine)")
    batch_size: int = Field(32, ge=1)
    max_grad_norm: float | None = Field(
        1.0,
        gt=0,
        description="clip each step's gradient norm (Trainer's default); None: no clipping",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="recompute activations in the backward pass (TRL's default is on): for "
        "the 3.3M default model it only costs time (the warm start took 22% longer)",
    )
    seed: int = 0
    lora: LoraSettings | None = Field(
        None,
        description="train LoRA adapters (trainer.lora) and merge them into the saved model; "
        "None: every weight",
    )
    demonstrations: Path | None = Field(
        None, description="an OpenAI chat JSONL whose records are added to the built-in ones"
    )

    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.model_dump_json(exclude_none=True).encode())
        if self.demonstrations is not None:
            digest.update(self.demonstrations.read_bytes())
        return digest.hexdigest()[:16]


def tokenize_conversation(
    codec: ChatCodec,
    messages: Sequence[Mapping[str, object]],
    tools: list[dict[str, Any]] | None = None,
) -> dict[str, list[int]]:
    """``input_ids`` and ``assistant_masks`` of a conversation, laid out by the server's codec.

    The layout is the rollout server's own (``EpisodeRunner`` with the same ``ChatCodec``):
    the opening messages as the first prompt (with the env's ``tools``, as an episode
    shows them); per assistant turn its tokens and the
    end-of-turn token (mask 1; 0 for a message of ``weight`` 0), then the environment's reply up to the next generation
    prompt (``codec.continuation``, mask 0). So SFT trains on the ids the model sees and
    samples in a rollout (a unit test runs both and compares the id streams).
    """
    turns = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    if not turns:
        raise ValueError("a demonstration needs at least one assistant message")
    ids = codec.first_prompt([dict(m) for m in messages[: turns[0]]], tools=tools)
    mask = [0] * len(ids)
    for index, turn in enumerate(turns):
        guess = [*codec.encode(str(messages[turn]["content"])), codec.eos_id]
        ids += guess
        mask += [0 if messages[turn].get("weight") == 0 else 1] * len(guess)
        if index + 1 < len(turns):
            reply = [dict(m) for m in messages[turn + 1 : turns[index + 1]]]
            between = codec.continuation(reply, stopped=True)
            ids += between
            mask += [0] * len(between)
    return {"input_ids": ids, "assistant_masks": mask}


def demonstration_records(config: WarmStartConfig) -> list[ChatRecord]:
    """The built-in demonstrations as chat records, then the file's, if any."""
    records = config.demos.records(config.seed)
    if config.demonstrations is not None:
        records += read_jsonl(config.demonstrations)
    return records


def sft_examples(config: WarmStartConfig, codec: ChatCodec) -> list[dict[str, list[int]]]:
    """One pre-tokenized example per demonstration record, shuffled."""
    return _shuffled(codec, demonstration_records(config), config.seed)


def _shuffled(codec: ChatCodec, records: list[ChatRecord], seed: int) -> list[dict[str, list[int]]]:
    examples = [
        tokenize_conversation(codec, template_messages(record), record.tools) for record in records
    ]
    random.Random(seed).shuffle(examples)
    return examples


def is_warm(out_dir: Path, config: WarmStartConfig) -> bool:
    """Whether ``out_dir`` already holds this config's warm start."""
    marker = out_dir / MARKER_FILE
    return marker.is_file() and json.loads(marker.read_text()).get("fingerprint") == (
        config.fingerprint()
    )


def warm_start(
    config: WarmStartConfig,
    base_model: Path,
    out_dir: Path,
    *,
    printer: Callable[[str], object] | None = None,
) -> Path:
    """Fine-tune ``base_model`` on the demonstrations into ``out_dir`` (idempotent).

    The demonstrations' first phases (``rollgym.run.demos``: Compute's generic copies at
    twice the batch, then its drills), each at its own peak learning rate, then the
    conversations at ``learning_rate``, each on a cosine schedule after a 5% warm-up; a
    phase without examples is skipped. With ``config.lora`` every phase trains one
    adapter, merged into the saved model. ``printer`` gets a progress line at every TRL log step.
    """
    if is_warm(out_dir, config):
        return out_dir
    from transformers import AutoModelForCausalLM, AutoTokenizer

    work_dir = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(work_dir, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model: Any = AutoModelForCausalLM.from_pretrained(base_model, dtype="float32")
    codec = ChatCodec(tokenizer)
    batch = config.batch_size
    phases = [
        Phase(first.name, _shuffled(codec, first.records, config.seed), first.learning_rate,
              1.0, first.batch_scale * batch)
        for first in config.demos.first_phases(config.seed)
    ]  # fmt: skip
    phases.append(
        Phase("SFT", sft_examples(config, codec), config.learning_rate, config.epochs, batch)
    )
    if config.lora is not None:
        from peft import get_peft_model

        model = get_peft_model(model, config.lora.peft_config())
    for phase in phases:
        if phase.examples:
            _train(model, tokenizer, phase, config, work_dir, printer)
    if config.lora is not None:  # GRPO starts from an ordinary model (and may add its own)
        model = model.merge_and_unload()
    model.save_pretrained(str(work_dir))
    tokenizer.save_pretrained(str(work_dir))
    marker = {"fingerprint": config.fingerprint(), "config": config.model_dump(mode="json")}
    (work_dir / MARKER_FILE).write_text(json.dumps(marker, indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    work_dir.rename(out_dir)
    return out_dir


@dataclasses.dataclass(frozen=True)
class Phase:
    """One SFT pass: its examples, peak learning rate (cosine), epochs and batch size."""

    name: str
    examples: list[dict[str, list[int]]]
    learning_rate: float
    epochs: float
    batch_size: int


def _train(
    model: Any,
    tokenizer: Any,
    phase: Phase,
    config: WarmStartConfig,
    work_dir: Path,
    printer: Callable[[str], object] | None,
) -> None:
    """One phase with TRL's ``SFTTrainer``, on ``model`` in place."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class Progress(TrainerCallback):
        started = 0.0  # set when training begins: loading and tokenizing are not counted

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.started = time.monotonic()

        def on_log(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            logs = kw.get("logs") or {}
            if printer is not None and "loss" in logs:
                accuracy = logs.get("mean_token_accuracy", float("nan"))
                elapsed = time.monotonic() - self.started
                printer(
                    f"  {phase.name} step {state.global_step}/{state.max_steps}: loss "
                    f"{logs['loss']:.3f}, token accuracy {accuracy:.2f}, "
                    f"{time_left(state.global_step, state.max_steps, elapsed)}"
                )

    args = SFTConfig(
        output_dir=str(work_dir),
        num_train_epochs=phase.epochs,
        per_device_train_batch_size=phase.batch_size,
        learning_rate=phase.learning_rate,
        max_grad_norm=config.max_grad_norm or 0.0,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        max_length=512,
        save_strategy="no",
        logging_steps=10,
        report_to=[],
        disable_tqdm=True,
        seed=config.seed,
        bf16=False,
        dataloader_pin_memory=False,
        gradient_checkpointing=config.gradient_checkpointing,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="trl")
        sft = SFTTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(phase.examples),
            processing_class=tokenizer,
            callbacks=[Progress()],
        )
    sft.remove_callback(PrinterCallback)
    sft.train()
