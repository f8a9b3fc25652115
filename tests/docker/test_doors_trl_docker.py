"""``rollgym.doors.trl``'s tool calls on real boxes: the unit tier's fake pool replaced by
the factory's own Docker pool (Compute's python tool, GuessTool's verdict program)."""

from __future__ import annotations

import pytest

from rollgym.doors.trl import TrlEnvironments, closing_reward


@pytest.fixture(scope="module")
def compute():
    with TrlEnvironments("rollgym/Compute-v0", pool_size=1, kinds=["sum"]) as environments:
        yield environments


def test_a_python_call_runs_in_the_box_and_the_answer_is_judged(compute) -> None:
    environment = compute()
    environment.reset(**compute.rows([7])[0])
    task = environment._env.unwrapped.solved
    total = environment.python(code="print(sum(int(n) for n in open('numbers.txt')))")
    assert total.strip() == task.task.answer  # the file only the box holds
    answered = [{"role": "assistant", "content": f"<answer>{total.strip()}</answer>"}]
    assert closing_reward([answered], [environment]) == [1.0]
    assert environment.get_reward() == 0.0 and compute.env_s > 0


def test_guess_tool_verdicts_come_from_the_box() -> None:
    with TrlEnvironments("rollgym/GuessTool-v0", pool_size=1) as guess:
        environment = guess()
        environment.reset(**guess.rows([0])[0])
        target = environment._env.unwrapped._target
        low = environment.guess(number=1) if target != 1 else "Correct!"
        assert low == "Correct!" or low.startswith("Higher.")
        assert environment.guess(number=target) == "Correct!"
        assert environment.get_reward() == pytest.approx(1.0 - 0.05 * (target != 1))
