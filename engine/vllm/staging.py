"""Staged weight updates: load new weights into a shadow of the model while the old ones
serve, then swap them in while the engine is paused.

vLLM's ``reload_weights`` loads in place: layer by layer it moves the live parameters to
the meta device, loads, repacks them for the CPU kernels and copies the result back, so
sampling cannot run until the whole load is done. Here the load goes into a shadow:

* ``stage(model, weights)`` builds the shadow, a shallow copy of every module with tables
  of its own (parameters, buffers, children; everything else is shared, read-only). Each
  parameter and persistent buffer is a fresh tensor in checkpoint layout (the one vLLM
  recorded at the first load, ``LAYERWISE_INFO``); tensors shared between modules (a tied
  LM head) stay shared. The model's own ``load_weights`` fills the shadow, then each
  module it filled gets its quantization method's ``process_weights_after_loading`` (on
  CPU: the GEMM repacking). Nothing live is touched, so this runs in a thread of the
  engine process while the engine keeps stepping.
* ``Staged.swap()`` (engine paused) hands each filled module's tensors, and the attributes
  its processing set (the CPU build keeps its packed GEMM in ``cpu_linear``), to the live
  module: table and attribute writes, no weight is copied.

A module the update fills only in part, or an attention layer (its scales are processed
with the whole model's), is refused before anything is swapped: ``StagingError``.
This module runs inside the engine process and imports nothing of rollgym.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Iterable
from types import MethodType
from typing import Any

import torch
from torch import nn

_TABLES = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set")
_MISSING = object()
_WRAPPER = "online_process_loader"  # vLLM's layerwise.make_online_process_loader


class StagingError(RuntimeError):
    """The update cannot be staged (the live weights were not touched)."""


@dataclasses.dataclass
class Staged:
    """Loaded, processed modules waiting to replace their live twins."""

    pairs: list[tuple[nn.Module, nn.Module]]  # (live, shadow)
    tensors: int  # checkpoint tensors read

    def swap(self) -> int:
        """Make every shadow's state the live module's (the engine must be paused)."""
        for live, shadow in self.pairs:
            _hand_over(shadow, live)
        self.pairs = []
        return self.tensors


def stage(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> Staged:
    """Load ``weights`` (checkpoint names) into a shadow of ``model``; see the docstring."""
    shadows = _Shadows()
    root: Any = shadows.of(model)  # a vLLM model: it has ``load_weights``
    count = 0

    def counted() -> Iterable[tuple[str, torch.Tensor]]:
        nonlocal count
        for item in weights:
            count += 1
            yield item

    with torch.no_grad():
        loaded = root.load_weights(counted())
        written = _tensor_ids(root, loaded)
        filled = [(live, s) for live, s in shadows.pairs() if _filled(shadows, s, written)]
        _process_all(shadows, filled)
    return Staged(pairs=filled, tensors=count)


class _Shadows:
    """The shadow of each module, made once (shared modules and tensors stay shared)."""

    def __init__(self) -> None:
        self._modules: dict[int, tuple[nn.Module, nn.Module]] = {}
        self._tensors: dict[int, torch.Tensor] = {}
        self._fresh: dict[int, list[torch.Tensor]] = {}  # shadow id -> its fresh tensors

    def of(self, module: nn.Module) -> nn.Module:
        known = self._modules.get(id(module))
        if known is not None:
            return known[1]
        shadow = copy.copy(module)
        self._modules[id(module)] = (module, shadow)
        shadow._non_persistent_buffers_set = set(module._non_persistent_buffers_set)
        shadow._modules = {n: None if c is None else self.of(c) for n, c in module._modules.items()}
        params, buffers = _recorded(module)
        fresh: list[torch.Tensor] = []
        shadow._parameters = {}
        for name, param in module._parameters.items():
            new = (
                None
                if param is None
                else self._fresh_tensor(param, params.get(name), module, shadow)
            )
            shadow._parameters[name] = new  # type: ignore[assignment]  # None too: no bias
            fresh += [new] if new is not None else []
        shadow._buffers = {}
        for name, buffer in module._buffers.items():
            if buffer is not None and name not in module._non_persistent_buffers_set:
                buffer = self._fresh_tensor(buffer, buffers.get(name), module, shadow)
                fresh.append(buffer)
            shadow._buffers[name] = buffer  # a non-persistent one is shared: never loaded
        self._fresh[id(shadow)] = fresh
        return shadow

    def pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return list(self._modules.values())

    def fresh_in(self, shadow: nn.Module) -> list[torch.Tensor]:
        return self._fresh[id(shadow)]

    def _fresh_tensor(
        self, live: torch.Tensor, recorded: torch.Tensor | None, owner: nn.Module, shadow: nn.Module
    ) -> torch.Tensor:
        """A new tensor for ``live`` (once per live tensor), in the recorded checkpoint
        layout when vLLM kept one, its loader bound to ``shadow``."""
        known = self._tensors.get(id(live))
        if known is not None:
            return known
        template = recorded if recorded is not None else live
        tensor = torch.empty_strided(
            tuple(template.size()), tuple(template.stride()), dtype=template.dtype,
            device=live.device,
        )  # fmt: skip
        tensor.__class__ = template.__class__
        tensor.__dict__ = {k: _for_shadow(v, owner, shadow) for k, v in template.__dict__.items()}
        self._tensors[id(live)] = tensor
        return tensor


def _recorded(module: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The checkpoint-layout (meta) tensors vLLM recorded for ``module`` at its first load."""
    from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO

    info = LAYERWISE_INFO.get(module)
    return info.restore_metadata if info is not None else ({}, {})


def _for_shadow(value: Any, live: nn.Module, shadow: nn.Module) -> Any:
    """A tensor attribute for the shadow. A weight loader is unwrapped from the buffering
    wrapper an in-place reload leaves on the recorded tensors, and one bound to the live
    module (or to the sentinel vLLM binds recorded ones to) is bound to ``shadow``."""
    from vllm.model_executor.model_loader.reload.sanitize import layer_ref_sentinel

    value = inspect.unwrap(value, stop=lambda f: getattr(f, "__name__", "") != _WRAPPER)
    if isinstance(value, MethodType) and any(
        value.__self__ is o for o in (live, layer_ref_sentinel)
    ):
        return value.__func__.__get__(shadow)
    return value


def _tensor_ids(root: nn.Module, loaded: Iterable[str]) -> set[int]:
    tensors: dict[str, torch.Tensor] = dict(root.named_parameters(remove_duplicate=False))
    tensors.update(root.named_buffers(remove_duplicate=False))
    return {id(tensors[name]) for name in loaded if name in tensors}


def _filled(shadows: _Shadows, shadow: nn.Module, written: set[int]) -> bool:
    """Whether the update filled ``shadow``; raises when it filled only part of it."""
    hit = [id(t) in written for t in shadows.fresh_in(shadow)]
    if not any(hit):
        return False
    if not all(hit):
        raise StagingError(f"the update fills {type(shadow).__name__} only in part")
    return True


def _process_all(shadows: _Shadows, filled: list[tuple[nn.Module, nn.Module]]) -> None:
    """Process each filled module once. Modules tied to the same tensors under the same
    quantization method (an LM head tied to the embedding) share one result: vLLM's own
    load packs that matrix twice, here the second module takes the first one's."""
    done: dict[tuple[type, frozenset[int]], tuple[nn.Module, nn.Module]] = {}
    for live, shadow in filled:
        tied = (type(getattr(shadow, "quant_method", None)), _tensor_set(shadows, shadow))
        first = done.get(tied)
        if first is not None and _same_tables(first[1], shadow):
            _copy_state(first[1], first[0], shadow)
            continue
        _process(shadow)
        done[tied] = (live, shadow)


def _tensor_set(shadows: _Shadows, shadow: nn.Module) -> frozenset[int]:
    return frozenset(id(t) for t in shadows.fresh_in(shadow))


def _same_tables(a: nn.Module, b: nn.Module) -> bool:
    return a._parameters.keys() == b._parameters.keys() and a._buffers.keys() == b._buffers.keys()


def _process(shadow: nn.Module) -> None:
    """What vLLM's loader does to a module after loading it (repacking, quantizing)."""
    from vllm.model_executor.layers.attention import is_deferred_attention_layer
    from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase

    if is_deferred_attention_layer(shadow):
        raise StagingError(f"the update loads the attention layer {type(shadow).__name__}")
    method = getattr(shadow, "quant_method", None)
    if isinstance(method, QuantizeMethodBase):
        method.process_weights_after_loading(shadow)
        reconcile = getattr(shadow, "update_param_tp_status", None)  # what vLLM's loader does
        if callable(reconcile):
            reconcile()


def _hand_over(shadow: nn.Module, live: nn.Module) -> None:
    """Give ``live`` the shadow's tensors and every attribute the staging set or dropped."""
    _copy_state(shadow, live, live)


def _copy_state(source: nn.Module, before: nn.Module, target: nn.Module) -> None:
    """Give ``target`` the tensors of ``source`` and each attribute in which ``source``
    differs from ``before`` (the module it was copied from)."""
    target._parameters.clear()
    target._parameters.update(source._parameters)
    target._buffers.clear()
    target._buffers.update(source._buffers)
    target._non_persistent_buffers_set = set(source._non_persistent_buffers_set)
    changed, old, state = source.__dict__, before.__dict__, target.__dict__
    for key in [k for k in old if k not in changed and k not in _TABLES]:
        state.pop(key, None)
    for key, value in changed.items():
        if key not in _TABLES and old.get(key, _MISSING) is not value:
            state[key] = value
