"""Warm start: supervised fine-tuning (TRL's ``SFTTrainer``) on GuessNumber demonstrations.

No pretrained model can be downloaded here, so the default model starts from random weights
and first learns the game's format and a reasonable policy by imitation. The demonstrations
mix the oracle (binary search over the range the feedback leaves open) with imperfect play
(each guess random within that range with probability ``noise``): the warm-started policy
then guesses well but not optimally, which leaves room for RL to improve its success rate.

The demonstrations travel in the data format of ``rollgym generate`` and ``rollgym export``
(OpenAI chat records, ``rollgym.contract.chat``): the built-in ones are converted to it, and
``demonstrations`` adds the records of a ``chat.jsonl`` (say, successful episodes that
``rollgym generate --min-reward 1`` sampled from a stronger model).

Each conversation becomes one pre-tokenized example laid out by the rollout server's own
``ChatCodec`` (``tokenize_conversation``): the opening rendered with the generation prompt;
then per turn the guess's tokens and the end-of-turn token (trained on, ``assistant_masks``
1, unless the message has OpenAI's ``weight`` 0), and the chat template's text up to the next generation prompt (context only, 0). TRL's ``SFTTrainer`` takes such a dataset as is and masks the labels.

The result is an ordinary model directory (weights + tokenizer); a marker file records the
config, so a second call with the same config returns at once (``rollgym run`` resumes).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rollgym.contract.chat import ChatRecord, chat_record, read_jsonl, template_messages
from rollgym.envs.guess_demos import DrillTurns, NoiseStyle
from rollgym.server.conversation.codec import ChatCodec

MARKER_FILE = "rollgym-warmstart.json"
# The built-in task's rules beside its range (docs/training.md says why each is needed).
BUILT_IN_RULES = {"strict": True, "feedback": "range"}


class WarmStartConfig(BaseModel):
    """The SFT warm start: demonstrations and optimisation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    oracle_episodes: int = Field(50, ge=0, description="demonstrations by binary search")
    imperfect_episodes: int = Field(550, ge=0, description="demonstrations with noisy guesses")
    noise: float = Field(0.8, ge=0, le=1, description="share of wasteful guesses when imperfect")
    noise_style: NoiseStyle = Field(
        "lowest", description="a wasteful guess: random in the open range, or its lowest number"
    )
    drill_episodes: int = Field(
        300,
        ge=0,
        description="conversations that train the last turn only, after untrained random "
        "guesses (guess_demos.drills): every late position seen, none of the early play taught",
    )
    drill_turns: DrillTurns = Field(
        "later", description="the turns drills teach: every one after the first, or the last only"
    )
    endgame_episodes: int = Field(
        150,
        ge=0,
        description="drills of the end game (guess_demos.endgames): untrained guesses in "
        "the open range until one number is left, then that number, trained; every number "
        "equally. They sharpen the trees RL learns; the collapses they made more frequent "
        "are the trust region's (trainer.max_step_kl) to stop (docs/training.md)",
    )
    low: int = 1
    high: int = 8
    max_turns: int = Field(3, ge=1)
    env_kwargs: dict[str, Any] = Field(
        default_factory=lambda: dict(BUILT_IN_RULES),
        description="the demo env's other kwargs (strict, feedback): the task's",
    )
    epochs: float = Field(6.0, gt=0)
    learning_rate: float = Field(2e-3, gt=0)
    batch_size: int = Field(32, ge=1)
    gradient_checkpointing: bool = Field(
        False,
        description="recompute activations in the backward pass (TRL's default is on): for "
        "the 3.3M default model it only costs time (the warm start took 22% longer)",
    )
    seed: int = 0
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
    """The built-in GuessNumber demonstrations as chat records, then the file's, if any."""
    from rollgym.envs.guess_demos import demonstrations, drills, endgames

    game: dict[str, Any] = {
        "low": config.low,
        "high": config.high,
        "max_turns": config.max_turns,
        "env_kwargs": config.env_kwargs,
    }
    seed, oracle, imperfect = config.seed, config.oracle_episodes, config.imperfect_episodes
    conversations: list[Sequence[Mapping[str, Any]]] = []
    conversations += demonstrations(oracle, seed=seed, **game)
    conversations += demonstrations(
        imperfect, seed=seed + oracle, noise=config.noise, style=config.noise_style, **game
    )
    conversations += drills(
        config.drill_episodes, seed=seed + oracle + imperfect, turns=config.drill_turns, **game
    )
    endgame_seed = seed + oracle + imperfect + config.drill_episodes
    conversations += endgames(config.endgame_episodes, seed=endgame_seed, **game)
    records = [chat_record(conversation) for conversation in conversations]
    if config.demonstrations is not None:
        records += read_jsonl(config.demonstrations)
    return records


def sft_examples(config: WarmStartConfig, codec: ChatCodec) -> list[dict[str, list[int]]]:
    """One pre-tokenized example per demonstration record, shuffled."""
    examples = [
        tokenize_conversation(codec, template_messages(record), record.tools)
        for record in demonstration_records(config)
    ]
    random.Random(config.seed).shuffle(examples)
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

    ``printer`` gets a progress line at every TRL log step (loss, token accuracy).
    """
    if is_warm(out_dir, config):
        return out_dir
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class Progress(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            logs = kw.get("logs") or {}
            if printer is not None and "loss" in logs:
                accuracy = logs.get("mean_token_accuracy", float("nan"))
                printer(
                    f"  SFT step {state.global_step}/{state.max_steps}: loss {logs['loss']:.3f}, "
                    f"token accuracy {accuracy:.2f}"
                )

    work_dir = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(work_dir, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype="float32")
    args = SFTConfig(
        output_dir=str(work_dir),
        num_train_epochs=config.epochs,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
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
            train_dataset=Dataset.from_list(sft_examples(config, ChatCodec(tokenizer))),
            processing_class=tokenizer,
            callbacks=[Progress()],
        )
    sft.remove_callback(PrinterCallback)
    sft.train()
    sft.save_model(str(work_dir))
    marker = {"fingerprint": config.fingerprint(), "config": config.model_dump(mode="json")}
    (work_dir / MARKER_FILE).write_text(json.dumps(marker, indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    work_dir.rename(out_dir)
    return out_dir
