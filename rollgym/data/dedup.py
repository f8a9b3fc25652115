"""Deduplication of trajectories: exact by token ids, near by MinHash over the actions.

**Exact.** Two trajectories are duplicates when their token ids are equal: the first
prompt and everything after it (``prompt_ids`` + ``completion_ids``). The first one seen
is kept.

**Near.** Sampled groups are full of almost-identical answers to the same task. Two
trajectories are near-duplicates when they start from the same first prompt (``scope=
"prompt"``, the default; ``"all"`` compares across prompts too) and the Jaccard
similarity of their *actions* (the model's tokens, ``loss_mask == 1``, turn by turn) is at
least ``threshold``. The actions are cut into shingles of ``shingle`` consecutive token
ids (a turn shorter than that is one shingle; turns never share a shingle) and the
similarity is estimated by MinHash (Broder, 1997):

* each shingle is read as an integer ``x`` (a polynomial in its token ids, mod ``p``);
  ``num_perm`` hash functions
  ``h_i(x) = (a_i x + b_i) mod p`` (``p = 2^31 - 1``, fixed seeds) each keep their minimum
  over the shingles; the share of equal minima between two signatures estimates their
  Jaccard similarity (standard error ``sqrt(J(1-J)/num_perm)``);
* locality-sensitive hashing finds the candidates without comparing every pair: the
  signature is cut into ``bands`` bands of ``num_perm / bands`` rows, and two signatures
  that agree on a whole band land in the same bucket. The chance that a pair of
  similarity ``s`` becomes a candidate is ``1 - (1 - s^r)^b``; with 64 hashes in 8 bands
  of 8 that is 0.97 at ``s = 0.8`` and 0.02 at ``s = 0.4``;
* each candidate is checked against the estimate; a trajectory whose estimate with a
  kept one reaches ``threshold`` is dropped, the first seen is kept.

    >>> exact_key([1, 2], [3]) == exact_key([1, 2], [3])
    True
    >>> a = MinHasher().signature([[5, 6, 7, 8, 9, 10]])
    >>> float(MinHasher.similarity(a, a))
    1.0
"""

from __future__ import annotations

import dataclasses
import hashlib
from array import array
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np

_PRIME = (1 << 31) - 1
_BASE = 1_000_003
Scope = Literal["prompt", "all"]


def exact_key(prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> bytes:
    """A digest of the token ids: equal ids, equal keys."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(array("q", prompt_ids).tobytes())
    digest.update(b"|")
    digest.update(array("q", completion_ids).tobytes())
    return digest.digest()


def actions(completion_ids: Sequence[int], loss_mask: Sequence[int]) -> list[list[int]]:
    """The model's token runs (``loss_mask == 1``), one list per turn."""
    runs: list[list[int]] = []
    inside = False
    for token, mask in zip(completion_ids, loss_mask, strict=True):
        if mask:
            if not inside:
                runs.append([])
            runs[-1].append(token)
        inside = bool(mask)
    return runs


class MinHasher:
    """MinHash signatures of token runs (see the module docstring)."""

    def __init__(self, *, num_perm: int = 64, shingle: int = 3, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.num_perm, self.shingle = num_perm, shingle
        self._a = rng.integers(1, _PRIME, num_perm, dtype=np.uint64)
        self._b = rng.integers(0, _PRIME, num_perm, dtype=np.uint64)

    def shingle_hashes(self, runs: Iterable[Sequence[int]]) -> np.ndarray:
        """Each distinct shingle as an integer below ``p``: ``sum t_i B^(k-1-i) mod p``,
        ``B`` a fixed odd base (a turn shorter than ``k`` tokens is one shingle)."""
        k, parts = self.shingle, []
        for run in runs:
            tokens = np.asarray(run, dtype=np.int64) % _PRIME
            if len(tokens) == 0:
                continue
            if len(tokens) < k:
                tokens = np.concatenate([tokens, np.full(k - len(tokens), _PRIME - 1)])
            windows = np.lib.stride_tricks.sliding_window_view(tokens, k)
            value = np.zeros(len(windows), dtype=np.int64)
            for i in range(k):  # Horner, reduced at each step: stays below 2^62
                value = (value * _BASE + windows[:, i]) % _PRIME
            parts.append(value)
        if not parts:
            return np.empty(0, dtype=np.uint64)
        return np.unique(np.concatenate(parts)).astype(np.uint64)

    def signature(self, runs: Iterable[Sequence[int]]) -> np.ndarray:
        """The ``num_perm`` minima; an empty action set gets all-``p`` (similar only to itself)."""
        x = self.shingle_hashes(runs)
        if len(x) == 0:
            return np.full(self.num_perm, _PRIME, dtype=np.uint64)
        values = (np.outer(self._a, x) + self._b[:, None]) % _PRIME
        result: np.ndarray = values.min(axis=1)
        return result

    @staticmethod
    def similarity(a: np.ndarray, b: np.ndarray) -> float:
        """The MinHash estimate of the Jaccard similarity: the share of equal minima."""
        return float(np.mean(a == b))


@dataclasses.dataclass
class Deduplicator:
    """Feed trajectories in order; ``keep`` says whether each one is new (see the docstring)."""

    exact: bool = True
    near: bool = True
    threshold: float = 0.8
    bands: int = 8
    scope: Scope = "prompt"
    hasher: MinHasher = dataclasses.field(default_factory=MinHasher)
    exact_dropped: int = 0
    near_dropped: int = 0

    def __post_init__(self) -> None:
        if self.hasher.num_perm % self.bands:
            raise ValueError(f"num_perm {self.hasher.num_perm} must split into {self.bands} bands")
        self._seen: set[bytes] = set()
        self._buckets: dict[tuple[bytes, int, bytes], list[int]] = {}
        self._kept: list[np.ndarray] = []

    def keep(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int], loss_mask: Sequence[int]
    ) -> bool:
        if self.exact:
            key = exact_key(prompt_ids, completion_ids)
            if key in self._seen:
                self.exact_dropped += 1
                return False
        if self.near and not self._near_new(prompt_ids, completion_ids, loss_mask):
            self.near_dropped += 1
            return False
        if self.exact:
            self._seen.add(key)
        return True

    def _near_new(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int], loss_mask: Sequence[int]
    ) -> bool:
        signature = self.hasher.signature(actions(completion_ids, loss_mask))
        scope = exact_key(prompt_ids, ()) if self.scope == "prompt" else b""
        rows = self.hasher.num_perm // self.bands
        keys = [
            (scope, band, signature[band * rows : (band + 1) * rows].tobytes())
            for band in range(self.bands)
        ]
        candidates = {i for key in keys for i in self._buckets.get(key, ())}
        if any(
            MinHasher.similarity(signature, self._kept[i]) >= self.threshold for i in candidates
        ):
            return False
        index = len(self._kept)
        self._kept.append(signature)
        for key in keys:
            self._buckets.setdefault(key, []).append(index)
        return True
