"""TRL's GRPO trainer, fed by the rollout server: the config mapping and a subclass.

Training is TRL's: ``GRPOTrainer`` computes the group-relative advantages from the rewards,
recomputes the policy's logprobs, and applies its clipped GRPO/DAPO loss with its
importance-sampling correction from the behaviour logprobs the server recorded
(``vllm_importance_sampling_correction``: ``exp(logp_train_at_step_start - logp_behaviour)``,
truncated at ``importance_sampling_cap``). That ratio is what keeps asynchronous training
sound: a sample from ``k`` versions ago is reweighted towards the current policy.

TRL gets ``logp_train_at_step_start`` from a forward pass of its own over the whole batch
before the step. With one optimizer step per batch (``num_iterations=1``) those are exactly
the logprobs the loss's forward computes, at the same weights, so ``ServerGRPOTrainer``
takes them from there (detached) and builds the ratio before the loss uses it: one forward
pass fewer per step (py-spy put TRL's at 18% of the trainer's busy time in ``bench.peers`` on GuessTool).

Why TRL's ``GRPOTrainer`` and not ``trl.experimental.async_grpo.AsyncGRPOTrainer``: the
latter forwards through a FlashAttention-3 tree-attention kernel fetched from the Hub and
syncs weights over NCCL; neither exists on a CPU-only machine without network.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from rollgym.trainer import trackers
from rollgym.trainer.alarms import behaviour_stats, zero_variance_share
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.lm_head_chunk import use_cpu_chunk
from rollgym.trainer.shared_prompt import can_share_prompts, shared_prompt_forward
from rollgym.trainer.trust_region import StepTrustRegion

PLACEHOLDER_PROMPT = "(tasks are chosen by the rollout server)"
SAMPLE_INDEX = "rollgym_sample_index"  # a row's place in the batch the server sent


def grpo_args(config: TrainerConfig, **overrides: Any) -> GRPOConfig:
    """TRL's ``GRPOConfig`` for ``config``: one pull, one optimizer step, one push.

    ``overrides`` set other ``GRPOConfig`` fields, or replace these (``bench.peers`` runs
    TRL's own generation on the same settings).
    """
    values: dict[str, Any] = dict(
        output_dir=str(config.output_dir),
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=config.group_size,
        num_iterations=1,
        max_steps=config.total_steps,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_schedule,
        warmup_steps=config.warmup_steps,
        adam_epsilon=config.adam_epsilon,
        weight_decay=config.weight_decay,
        gradient_checkpointing=config.gradient_checkpointing,
        max_grad_norm=config.max_grad_norm,
        loss_type=config.loss_type,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        beta=config.beta,
        temperature=config.temperature,
        scale_rewards=config.scale_rewards,
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode=config.importance_sampling,
        vllm_importance_sampling_clip_max=config.importance_sampling_cap,
        save_strategy="steps",
        save_steps=config.checkpoint_every,
        save_total_limit=config.keep_checkpoints,
        ignore_data_skip=True,
        shuffle_dataset=False,
        logging_steps=1,
        report_to=list(config.report_to),
        project=trackers.PROJECT,  # trackio's (W&B's and MLflow's: trainer.trackers)
        run_name=trackers.run_name(config.output_dir),
        trackio_static_space_id=False,  # local only: never a Space on the Hub
        disable_tqdm=True,
        seed=config.seed,
        bf16=config.mixed_precision == "bf16",
        use_cpu=not torch.cuda.is_available(),  # CUDA where a GPU answers (bf16 needs it said)
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        model_init_kwargs={"dtype": "float32"},
    )
    return GRPOConfig(**{**values, **overrides})


def placeholder_prompts(config: TrainerConfig) -> Dataset:
    """TRL draws one prompt per group from a dataset; the server picks the real tasks."""
    return Dataset.from_dict({"prompt": [PLACEHOLDER_PROMPT] * config.groups_per_batch})


class ServerGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose samples come from ``rollout_func`` (the server) only.

    Two hooks, because TRL ties its behaviour-logprob correction to its own vLLM client:

    * the correction runs only when ``use_vllm`` is on, and ``GRPOConfig(use_vllm=True)``
      makes TRL build a vLLM client that syncs weights over NCCL (CUDA only). So the trainer
      is built with ``use_vllm=False`` and the flag is switched on afterwards: every
      ``use_vllm`` branch left on the ``rollout_func`` path is the correction itself;
    * ``_generate`` would then sync weights through that (absent) client before each rollout.
      Weights reach our server over HTTP instead (``trainer.callbacks.StepCallback``), so the
      override marks them as loaded.

    And one to save a forward pass: scoring a batch skips TRL's recomputation of its
    logprobs, and the loss's own forward supplies them (``_get_per_token_logps_and_entropies``
    while ``_compute_loss`` runs), with the ratio, the alarms and the sample log built there.
    Every forward of whole rows computes each distinct prompt once (``trainer.shared_prompt``).

    And ``log`` (public): each step's log gets rollgym's own series (``trainer.series``) before
    TRL hands it to the callbacks, so the trackers of ``report_to`` write both, one logger.
    """

    def __init__(
        self,
        *args: Any,
        sample_log: Path | None = None,
        train_embeddings: bool = True,
        max_step_kl: float | None = None,
        series: Callable[[], Mapping[str, float]] | None = None,
        **kwargs: Any,
    ) -> None:
        """``series``: rollgym's own metrics of the step just closed (``trainer.series``),
        merged into TRL's log of that step, so ``report_to``'s trackers get both."""
        super().__init__(*args, **kwargs)
        use_cpu_chunk(self.accelerator.device)  # TRL's LM head chunk is a GPU's
        self.series = series
        if self.rollout_func is None:
            raise ValueError("ServerGRPOTrainer needs rollout_func (the server's group feed)")
        config: Any = self.args
        if self.num_iterations != 1 or (
            config.steps_per_generation > config.gradient_accumulation_steps
        ):
            raise ValueError(
                "ServerGRPOTrainer takes the step-start logprobs from the loss's forward pass, "
                "which needs one optimizer step per sampled batch: num_iterations=1 and "
                "steps_per_generation <= gradient_accumulation_steps"
            )
        if not train_embeddings:  # before train() builds the optimizer from trainable params
            model: Any = self.model
            for module in (model.get_input_embeddings(), model.get_output_embeddings()):
                if module is not None:
                    module.weight.requires_grad_(False)
        self.use_vllm = True
        self._last_loaded_step = -1
        self.sample_log = sample_log
        self._scored: list[dict[str, Any]] = []  # the samples of the batch being trained
        self._loss_batch: dict[str, Any] | None = None  # awaiting the loss's own logprobs
        self.trust_region: StepTrustRegion | None = None
        if max_step_kl is not None:
            self.trust_region = StepTrustRegion(max_step_kl, self._batch_logps, self._record)
            self.add_callback(self.trust_region)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.series is not None and "loss" in logs:  # a step's log, not the closing summary
            logs = {**logs, **self.series()}
        super().log(logs, start_time)

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        batch = super()._prepare_inputs(generation_batch)
        model: Any = self.model
        if self.trust_region is not None and model.training:
            self.trust_region.before_step(model, batch)
        return batch

    def _batch_logps(self, model: Any, batch: dict[str, Any]) -> torch.Tensor:
        """The batch's per-token logprobs of the sampled tokens under ``model``'s weights."""
        completion_ids = batch["completion_ids"]
        input_ids = torch.cat([batch["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1)
        )
        return logps

    def _record(self, name: str, value: float) -> None:
        self._metrics["train"][name].append(value)

    def _generate(self, prompts: list[Any]) -> Any:
        self._last_loaded_step = self.state.global_step  # pushed over HTTP, not by TRL
        return super()._generate(prompts)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self.vllm_importance_sampling_correction = False  # no forward pass here: see _compute_loss
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self.vllm_importance_sampling_correction = True
        output[SAMPLE_INDEX] = torch.arange(len(inputs))  # TRL shuffles the rows after this
        rewards = [x["trajectory_reward"] if x["trajectory_valid"] else None for x in inputs]
        share = zero_variance_share(rewards, self.num_generations or len(rewards))
        self._metrics["train"]["alarms/zero_variance_groups"].append(share)
        self._scored = inputs
        return output

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        self._loss_batch = inputs
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._loss_batch = None

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        prompt_ids, prompt_mask = (
            input_ids[:, :-logits_to_keep],
            attention_mask[:, :-logits_to_keep],
        )
        text_only = not any(kwargs.values())  # no images, no MoE aux loss
        whole_batch = batch_size is None or batch_size >= input_ids.size(0)  # no chunking asked
        if text_only and whole_batch and can_share_prompts(model, prompt_ids, prompt_mask):
            with self.accelerator.autocast():
                out = shared_prompt_forward(model, input_ids, attention_mask, logits_to_keep)
            logps, entropies, aux = out.log_probs, out.entropy if compute_entropy else None, None
        else:
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                **kwargs,
            )
        batch, self._loss_batch = self._loss_batch, None
        if batch is not None:  # the loss's forward, at the weights the step starts from
            self._correct_for_behaviour(batch, logps.detach())
        return logps, entropies, aux

    def _correct_for_behaviour(self, batch: dict[str, Any], trainer_logps: torch.Tensor) -> None:
        """What TRL's scoring would have put in ``batch`` (the step-start logprobs and the
        importance-sampling ratio), then the alarms and the sample log."""
        mask = batch["completion_mask"] * batch.get("tool_mask", 1)
        behaviour = batch["sampling_per_token_logps"]
        ratio = behaviour_ratio(
            trainer_logps,
            behaviour,
            mask,
            mode=self.vllm_importance_sampling_mode,
            low=self.vllm_importance_sampling_clip_min,
            high=self.vllm_importance_sampling_clip_max,
        )
        batch["old_per_token_logps"], batch["importance_sampling_ratio"] = trainer_logps, ratio
        metrics = self._metrics["train"]
        shown = ratio[mask.bool()] if ratio.shape == mask.shape else ratio.flatten()
        metrics["sampling/importance_sampling_ratio/mean"].append(float(shown.mean()))
        stats = behaviour_stats(
            trainer_logps, behaviour, mask, cap=self.vllm_importance_sampling_clip_max
        )
        for name, value in stats.items():
            metrics[f"alarms/{name}"].append(value)
        if self.sample_log is not None:
            self._write_samples(self.sample_log, batch, mask)

    def _write_samples(self, path: Path, batch: dict[str, Any], mask: torch.Tensor) -> None:
        """One line per step: every sample's reward, advantage, sampled ids and both logprobs,
        in the order the server sent them."""
        samples = []
        for sample, row in zip(self._scored, server_order(batch).tolist(), strict=True):
            keep = mask[row].bool()
            samples.append(
                {
                    "group": sample["group_id"],
                    "reward": sample["trajectory_reward"],
                    "valid": sample["trajectory_valid"],
                    "advantage": round(float(batch["advantages"][row]), 4),
                    "ids": batch["completion_ids"][row][keep].tolist(),
                    "lp_behaviour": _rounded(batch["sampling_per_token_logps"][row][keep]),
                    "lp_trainer": _rounded(batch["old_per_token_logps"][row][keep]),
                }
            )
        line = {"step": self.state.global_step + 1, "samples": samples}
        with path.open("a") as handle:
            handle.write(json.dumps(line) + "\n")


def server_order(batch: dict[str, Any]) -> torch.Tensor:
    """The rows of a batch TRL trains on, in the order the server sent them (TRL shuffles).

    >>> server_order({SAMPLE_INDEX: torch.tensor([2, 0, 1])})
    tensor([1, 2, 0])
    """
    return batch[SAMPLE_INDEX].argsort()


def behaviour_ratio(
    trainer_logps: torch.Tensor,
    behaviour_logps: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str,
    low: float | None,
    high: float | None,
) -> torch.Tensor:
    """TRL's importance-sampling ratio ``exp(logp_trainer - logp_behaviour)`` over the tokens
    where ``mask`` is 1 (a token the engine could not score counts 1): per token ``(B, T)``
    or per sequence ``(B, 1)``; ``*_truncate`` clamps it to ``[low, high]``, ``*_mask``
    zeroes it outside (``None``: no bound).

    >>> t, b = torch.tensor([[0.0, -1.0]]), torch.tensor([[-2.0, float("nan")]])
    >>> behaviour_ratio(t, b, torch.ones(1, 2), mode="token_truncate", low=None, high=3.0)
    tensor([[3., 1.]])
    >>> behaviour_ratio(t, b, torch.ones(1, 2), mode="sequence_mask", low=None, high=3.0)
    tensor([[0.]])
    """
    diff = torch.nan_to_num((trainer_logps - behaviour_logps) * mask, nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=low, max=high)
    low, high = low if low is not None else -math.inf, high if high is not None else math.inf
    outside = (ratio < low) | (ratio > high)
    return ratio.masked_fill(outside, 0.0)


def _rounded(logps: torch.Tensor) -> list[float]:
    return [round(x, 4) for x in logps.tolist()]
