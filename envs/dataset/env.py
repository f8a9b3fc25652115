"""``DatasetEnv``: the rows of a local data set as tasks, a shell in a box, one verified answer.

The common shape of math-with-a-tool and code tasks. Each episode is one row
(``envs.dataset.rows``; ``reset(options={"task_id": row_id})`` or drawn with the seed):
the row's ``files`` are put in the agent's working directory, the agent gets the
``prompt``, and each reply either runs one ```` ```bash ```` block in the box (its output
comes back) or ends the episode with ``<answer>...</answer>``, which the data set's
verifier judges (``envs.dataset.verifiers``): exact match, numeric tolerance, the row's
tests run as the box's verifier, or an LLM judge (``envs.dataset.judge``). The answering
step is ``terminated`` and pays the score (0 to 1); a rejected message costs
``invalid_penalty``; the turn limit (``max_episode_steps``) truncates an episode that
never answered.

A judge or tests that cannot score (the judge unreachable or answering nonsense, tests
past their time) make the episode an infrastructure failure, never a 0. The judge is
asked off the event loop's thread (``_aturn`` awaits it). The tests verifier needs boxes
with a verifier folder (``/tests``): a pool of many kinds (``ImagePool``); the others
take any pool.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError
from typing_extensions import Unpack

from rollgym.envs.box_kinds import default_kinds_pool, kind_pool
from rollgym.envs.core import Opening, Turn
from rollgym.envs.dataset.judge import Judge
from rollgym.envs.dataset.rows import DatasetError, DatasetRow, load_rows
from rollgym.envs.dataset.verifiers import (
    ExactVerifier,
    JudgeVerifier,
    NumericVerifier,
    TestsVerifier,
    VerifierConfig,
    exact_score,
    numeric_score,
)
from rollgym.envs.errors import ActionError, InfraError, TaskNotFound
from rollgym.envs.messages import clip_text, system, user
from rollgym.envs.parsing import code_blocks, extract_code
from rollgym.envs.programs import Program, RunShell, grade, write_file
from rollgym.envs.sandboxed import SandboxEnv, SandboxOptions
from rollgym.envs.verified import VerifiedEpisode, VerifiedStep, VerifiedStepReward, VerifierScore
from rollgym.sandboxes.base import WORK_DIR, Grading, SandboxPool
from rollgym.sandboxes.config import SandboxConfig

SYSTEM_PROMPT = (
    "Solve the user's task. You may run shell commands in a sandbox, where the task's "
    "files are in your working directory: each reply runs one ```bash code block and "
    "shows its output. Give your final answer as <answer>...</answer>."
)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
TESTS_DIR = "/tests"
VERIFIERS: TypeAdapter[VerifierConfig] = TypeAdapter(VerifierConfig)


class DatasetEnv(SandboxEnv[VerifiedStep, VerifiedEpisode]):
    """Rows of a local data set as tasks; see the module docstring.

    ``data_files``: JSONL or Parquet files; ``verifier``: a ``VerifierConfig`` or its dict
    (``{"kind": "numeric", "abs_tol": 0.01}``); ``box``: ``SandboxConfig`` fields of the
    boxes; ``judge``: a ready ``Judge`` (tests pass one on a fake transport).
    """

    def __init__(
        self,
        *,
        data_files: str | Sequence[str],
        verifier: VerifierConfig | dict[str, Any] | None = None,
        sandbox_pool: SandboxPool | None = None,
        box: dict[str, Any] | None = None,
        judge: Judge | None = None,
        step_reward: Callable[[VerifiedStep], float] | None = None,
        terminal_reward: Callable[[VerifiedEpisode], float] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        super().__init__(
            step_reward=step_reward or VerifiedStepReward(),
            terminal_reward=terminal_reward or VerifierScore(),
            sandbox_pool=sandbox_pool,
            **options,
        )
        try:
            self.verifier = VERIFIERS.validate_python(verifier or {"kind": "exact"})
        except ValidationError as exc:
            raise DatasetError(f"verifier {verifier!r}: {exc.errors()[0]['msg']}") from None
        self.rows = load_rows(data_files)
        _check_rows(self.rows, self.verifier)
        self._by_id = {row.id: row for row in self.rows}
        self.judge = judge
        if isinstance(self.verifier, JudgeVerifier) and judge is None:
            self.judge = Judge(self.verifier)
        self._box_config = SandboxConfig(**(box or {}))
        if isinstance(self.verifier, TestsVerifier):
            self._box_config = self._box_config.with_overrides(verifier_dirs=(TESTS_DIR,))
        self._view: SandboxPool | None = None
        self._row = self.rows[0]
        self._score = 0.0
        self._pending: str | None = None  # an answer the judge still has to score

    @property
    def row(self) -> DatasetRow:
        """The row of the current (or last) episode."""
        return self._row

    # --- boxes ---------------------------------------------------------------------------

    def _sandbox_pool(self) -> SandboxPool:
        if not isinstance(self.verifier, TestsVerifier):
            return super()._sandbox_pool()
        if self._pool is None:
            self._pool = default_kinds_pool()
        if self._view is None:
            self._view = kind_pool(self._pool, self._box_config, needed_by="a data set's tests")
        return self._view

    async def _asandbox_pool(self) -> SandboxPool:
        if isinstance(self.verifier, TestsVerifier):
            return self._sandbox_pool()
        return await super()._asandbox_pool()

    # --- the episode -----------------------------------------------------------------------

    def _open_program(self, options: dict[str, Any]) -> Program[Opening]:
        wanted = options.get("task_id")
        if wanted is None:
            self._row = self.rows[int(self.np_random.integers(len(self.rows)))]
        elif wanted in self._by_id:
            self._row = self._by_id[wanted]
        else:
            raise TaskNotFound(f"no row {wanted!r} in the data set")
        self._score, self._pending = 0.0, None
        for path, content in self._row.files.items():
            yield from write_file(path, content)
        listed = f"\nFiles: {', '.join(sorted(self._row.files))}" if self._row.files else ""
        return Opening(self._row.id, (system(SYSTEM_PROMPT), user(self._row.prompt + listed)))

    def _turn_program(self, action: str) -> Program[Turn[VerifiedStep]]:
        answers = ANSWER.findall(action)
        if answers and code_blocks(action):
            raise ActionError("Either run one ```bash block or give your <answer>, not both.")
        if len(answers) > 1:
            raise ActionError("Give exactly one <answer>...</answer>.")
        if answers:
            return (yield from self._answered(answers[0].strip()))
        try:
            command = extract_code(action, languages=("bash", "sh", "shell", "console"))
        except ActionError as exc:
            raise ActionError(f"{exc} Or give your final answer as <answer>...</answer>.") from None
        run = yield from self.agent_command(RunShell(command, self.command_timeout_s))
        error = run.problem if run.result is None else None
        if run.result is not None and not run.result.ok:
            error = f"the command exited with code {run.result.exit_code}"
        feedback = clip_text(run.describe(self.max_feedback_chars), self.max_feedback_chars + 100)
        return Turn(
            (user(feedback),), VerifiedStep(), failure="task" if error else None, error=error
        )

    def _answered(self, answer: str) -> Program[Turn[VerifiedStep]]:
        verifier, row = self.verifier, self._row
        if isinstance(verifier, ExactVerifier):
            self._score = exact_score(answer, _required(row.answer), verifier)
        elif isinstance(verifier, NumericVerifier):
            self._score = numeric_score(answer, _required(row.answer), verifier)
        elif isinstance(verifier, TestsVerifier):
            self._score = yield from self._tested(answer, verifier)
        else:
            self._pending = answer  # scored by the judge after the program (_turn, _aturn)
        return Turn((user("Your answer was recorded."),), VerifiedStep(), terminated=True)

    def _tested(self, answer: str, verifier: TestsVerifier) -> Program[float]:
        grading = Grading(
            command=f"ANSWER_FILE={TESTS_DIR}/answer.txt {TESTS_DIR}/test.sh",
            files={
                f"{TESTS_DIR}/test.sh": _required(self._row.tests).encode(),
                f"{TESTS_DIR}/answer.txt": answer.encode(),
            },
            cwd=WORK_DIR,
            timeout=verifier.timeout_s,
        )
        graded = yield from grade(grading)
        if graded.timed_out:
            raise InfraError(f"row {self._row.id}: its tests ran past {verifier.timeout_s:g} s")
        return 1.0 if graded.exit_code == 0 else 0.0

    def _turn(self, action: str) -> Turn[VerifiedStep]:
        turn = super()._turn(action)
        if self._pending is not None:
            answer, self._pending = self._pending, None
            assert self.judge is not None
            self._score = self.judge.score(self._row.prompt, answer, self._row.answer)
        return turn

    async def _aturn(self, action: str) -> Turn[VerifiedStep]:
        turn = await super()._aturn(action)
        if self._pending is not None:
            answer, self._pending = self._pending, None
            assert self.judge is not None
            self._score = await self.judge.ascore(self._row.prompt, answer, self._row.answer)
        return turn

    def _rejected(self, error: str) -> VerifiedStep:
        return VerifiedStep(valid=False)

    def _episode(self) -> VerifiedEpisode:
        return VerifiedEpisode(self._score)


def _required(value: str | None) -> str:
    assert value is not None, "checked when the data set was read"
    return value


def _check_rows(rows: Sequence[DatasetRow], verifier: VerifierConfig) -> None:
    """Each row has what its verifier needs; a numeric answer is a number."""
    for row in rows:
        if isinstance(verifier, TestsVerifier) and not row.tests:
            raise DatasetError(f"row {row.id}: the tests verifier needs a 'tests' column")
        if isinstance(verifier, ExactVerifier | NumericVerifier) and row.answer is None:
            raise DatasetError(f"row {row.id}: the {verifier.kind} verifier needs an 'answer'")
        if isinstance(verifier, NumericVerifier):
            try:
                float(_required(row.answer))
            except ValueError:
                raise DatasetError(f"row {row.id}: answer {row.answer!r} is not a number") from None
