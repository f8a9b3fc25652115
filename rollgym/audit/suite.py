"""Run the attacks on one env: ``audit(env_id, env_kwargs, episodes, pool=...)`` -> rows.

The env is made the way the rollout server makes it (``RegistryEnvs``: registered ids,
``"module:Env-v0"`` ids, the ``rollgym.envs`` entry points, plain text envs adapted to
chat), a sandboxed one on ``pool``. Each attack plays ``episodes`` times, on seeds 0 to
``episodes - 1``, each time on an env of its own; its row counts the attempts (steps) and
lists every crossing. An attack that stops on an exception of its own making is a
crossing too: the audit never passes an env it could not finish.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from rollgym.audit.attacks import ATTACKS, Attack
from rollgym.audit.play import Play
from rollgym.sandboxes.base import SandboxPool
from rollgym.server.rollout.environments import RegistryEnvs


@dataclasses.dataclass(frozen=True)
class Row:
    """One attack's line of the table."""

    attack: str
    attempts: int
    crossings: tuple[str, ...]


def audit(
    env_id: str,
    env_kwargs: Mapping[str, object],
    episodes: int,
    *,
    pool: SandboxPool | None,
    attacks: Sequence[Attack] = ATTACKS,
) -> list[Row]:
    """Every attack on ``env_id``; ``NotFound``/``BadRequest``/``NotEnabled`` (the server's
    errors) when the env cannot be made."""
    envs = RegistryEnvs(lambda: pool)
    rows = []
    for attack in attacks:
        attempts, crossings = 0, []
        for seed in range(episodes):
            play = Play(envs.make(env_id, env_kwargs, max_turns=None), seed)
            try:
                attack.run(play)
            except Exception as exc:  # the env broke the audit itself: never a pass
                play.crossings.append(f"the attack stopped: {exc!r}"[:300])
            finally:
                play.close()
            attempts += play.attempts
            crossings += play.crossings
        rows.append(Row(attack.name, attempts, tuple(crossings)))
    return rows
