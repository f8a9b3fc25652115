"""TRL's GRPO trainer, fed by the rollout server: the config mapping and a two-hook subclass.

Training is TRL's: ``GRPOTrainer`` computes the group-relative advantages from the rewards,
recomputes the policy's logprobs, and applies its clipped GRPO/DAPO loss with its
importance-sampling correction from the behaviour logprobs the server recorded
(``vllm_importance_sampling_correction``: ``exp(logp_train_at_step_start - logp_behaviour)``,
truncated at ``importance_sampling_cap``). That ratio is what keeps asynchronous training
sound: a sample from ``k`` versions ago is reweighted towards the current policy.

Why TRL's ``GRPOTrainer`` and not ``trl.experimental.async_grpo.AsyncGRPOTrainer``: the
latter forwards through a FlashAttention-3 tree-attention kernel fetched from the Hub and
syncs weights over NCCL; neither exists on a CPU-only machine without network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from rollgym.trainer.alarms import behaviour_stats, zero_variance_share
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.trust_region import StepTrustRegion

PLACEHOLDER_PROMPT = "(tasks are chosen by the rollout server)"


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
        report_to=[],
        disable_tqdm=True,
        seed=config.seed,
        bf16=False,
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
    """

    def __init__(
        self,
        *args: Any,
        sample_log: Path | None = None,
        train_embeddings: bool = True,
        max_step_kl: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if self.rollout_func is None:
            raise ValueError("ServerGRPOTrainer needs rollout_func (the server's group feed)")
        if not train_embeddings:  # before train() builds the optimizer from trainable params
            model: Any = self.model
            for module in (model.get_input_embeddings(), model.get_output_embeddings()):
                if module is not None:
                    module.weight.requires_grad_(False)
        self.use_vllm = True
        self._last_loaded_step = -1
        self.sample_log = sample_log
        self.trust_region: StepTrustRegion | None = None
        if max_step_kl is not None:
            self.trust_region = StepTrustRegion(max_step_kl, self._batch_logps, self._record)
            self.add_callback(self.trust_region)

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
        output = super()._generate_and_score_completions(inputs)
        mask = output["completion_mask"] * output.get("tool_mask", 1)
        stats = behaviour_stats(
            output["old_per_token_logps"],
            output["sampling_per_token_logps"],
            mask,
            cap=self.vllm_importance_sampling_clip_max,
        )
        rewards = [x["trajectory_reward"] if x["trajectory_valid"] else None for x in inputs]
        stats["zero_variance_groups"] = zero_variance_share(
            rewards, self.num_generations or len(rewards)
        )
        for name, value in stats.items():
            self._metrics["train"][f"alarms/{name}"].append(value)
        if self.sample_log is not None:
            self._write_samples(self.sample_log, inputs, output, mask)
        return output

    def _write_samples(
        self,
        path: Path,
        inputs: list[dict[str, Any]],
        output: dict[str, Any],
        mask: torch.Tensor,
    ) -> None:
        """One line per step: every sample's reward, advantage, sampled ids and both logprobs."""
        samples = []
        for i, sample in enumerate(inputs):
            keep = mask[i].bool()
            samples.append(
                {
                    "group": sample["group_id"],
                    "reward": sample["trajectory_reward"],
                    "valid": sample["trajectory_valid"],
                    "advantage": round(float(output["advantages"][i]), 4),
                    "ids": output["completion_ids"][i][keep].tolist(),
                    "lp_behaviour": [
                        round(x, 4) for x in output["sampling_per_token_logps"][i][keep].tolist()
                    ],
                    "lp_trainer": [
                        round(x, 4) for x in output["old_per_token_logps"][i][keep].tolist()
                    ],
                }
            )
        line = {"step": self.state.global_step + 1, "samples": samples}
        with path.open("a") as handle:
            handle.write(json.dumps(line) + "\n")
