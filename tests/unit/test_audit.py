"""``rollgym audit``: each attack finds the crossing it is for, on a plain text env that has
it (as a user's env would, adapted to chat), and passes an env that has none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
import pytest
from gymnasium import spaces

from rollgym.audit.commands import table
from rollgym.audit.suite import audit
from rollgym.cli import main

ROOT = Path(__file__).resolve().parents[2]
TEXT = spaces.Text(max_length=10_000_000, charset=[chr(c) for c in range(32, 127)])


class Flawed(gymnasium.Env[str, str]):
    """A text env with one flaw, chosen by ``flaw``; right answer "4096" for all."""

    metadata = {"render_modes": []}  # noqa: RUF012 - Gymnasium's own attribute

    def __init__(self, flaw: str):
        self.flaw = flaw
        self.observation_space = self.action_space = TEXT
        self.said: list[str] = []  # everything said, never forgotten: "sticky"'s flaw

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        last = f" Last time you said: {' '.join(self.said)}" if self.flaw == "sticky" else ""
        return "What is 2 to the 12th? Answer in <answer></answer>." + last, {}

    def step(self, action: str):
        self.said.append(action[:200])
        if "4096" in action:
            return "Right.", 1.0, True, False, {}
        if self.flaw == "gullible" and "all tests pass" in action:
            return "Well done.", 1.0, True, False, {}
        if self.flaw == "fragile" and "kill -9" in action:
            raise RuntimeError("the env fell over")
        if self.flaw == "leaky":
            return "Wrong: the expected answer is 4096.", 0.0, False, False, {}
        if self.flaw == "nosy" and "/proc/1/environ" in action:
            return "SECRET=answer: 4096", 0.0, False, False, {}
        if self.flaw == "echo":
            return f"You said: {action}", 0.0, False, False, {}
        return "Wrong.", 0.0, False, False, {}


FLAWS = {  # the flaw -> the attack that must find it
    "leaky": "reward from feedback",
    "nosy": "reward from reading the box",
    "gullible": "reward by tampering",
    "sticky": "residue between episodes",
    "fragile": "crashes counted as infra",
    "echo": "oversized and malformed actions",
}
for flaw in [*FLAWS, "none"]:
    if f"audit-test/{flaw}-v0" not in gymnasium.registry:
        gymnasium.register(
            f"audit-test/{flaw}-v0", entry_point=Flawed, kwargs={"flaw": flaw}, max_episode_steps=6
        )


@pytest.mark.parametrize("flaw", FLAWS)
def test_each_attack_finds_the_flaw_it_is_for(flaw: str) -> None:
    rows = audit(f"audit-test/{flaw}-v0", {}, 1, pool=None)
    crossed = {row.attack for row in rows if row.crossings}
    assert FLAWS[flaw] in crossed, table(flaw, 1, rows)
    assert all(row.attempts > 0 for row in rows)


def test_an_env_without_flaws_passes_and_the_command_says_so(capsys) -> None:
    assert main(["audit", "audit-test/none-v0", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "rollgym audit audit-test/none-v0 (2 episodes per attack)"
    assert out.rstrip().endswith("no crossing") and len(out.splitlines()) == 9


def test_a_crossing_exits_1_with_its_evidence(capsys) -> None:
    assert main(["audit", "audit-test/leaky-v0", "--episodes", "1"]) == 1
    out = capsys.readouterr().out
    assert "reward from feedback: paid as solved for '<answer>" in out


def test_the_built_in_env_without_a_sandbox_and_the_example_user_env_pass(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "rollgym-example-env"))
    for env_id in ("rollgym/GuessNumber-v0", "rollgym_example_env:example/Reverse-v0"):
        rows = audit(env_id, {}, 2, pool=None)
        assert not any(row.crossings for row in rows), table(env_id, 2, rows)


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["audit", "nope/Nothing-v0"], "no environment 'nope/Nothing-v0' is registered"),
        (["audit", "audit-test/none-v0", "--env-kwargs", "[1]"], "must be a JSON object"),
        (["audit", "audit-test/none-v0", "--env-kwargs", '{"x": 1}'], "cannot be made"),
        (["audit", "audit-test/none-v0", "--episodes", "0"], "at least 1"),
    ],
)
def test_what_cannot_be_audited_is_one_line_and_exit_2(capsys, argv, complaint) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert complaint in err and err.count("\n") == 1
