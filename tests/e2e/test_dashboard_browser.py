"""The dashboard in headless Chromium, against the real server (``rollgym serve``, vLLM).

The module drives a short loop by hand: a GuessNumber rollout job, then three "steps" of
pull, ack, weight push (the same weights: the version still moves) and a trainer report
(``POST /admin/dashboard/trainer``, as ``trainer.dashboard`` posts it during a run). The page must then show the server's
policy version and every chart with data, both in the DOM after a virtual-time budget and
in a screenshot that is not blank. Set ``ROLLGYM_DASHBOARD_PNG=docs/dashboard.png`` to keep
the screenshot.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import chromium
import httpx
import pytest
from PIL import Image

from rollgym.contract.dashboard import RewardPoint, TrainerReport
from rollgym.contract.wire import PullRequest, RolloutJob, SamplingSettings
from rollgym.run.server_process import ServerProcess
from rollgym.trainer.client import ServerClient

STEPS = 3
STAGES = ("sampling", "environment", "buffer", "training")


class Elements(HTMLParser):
    """Every element's attributes, and the text directly inside elements that have an id."""

    VOID = frozenset({"meta", "link", "br", "img", "input", "hr"})

    def __init__(self, html: str) -> None:
        super().__init__()
        self.html = html
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text_by_id: dict[str, str] = {}
        self._open: list[tuple[str, str | None]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.elements.append((tag, values))
        if tag not in self.VOID:
            self._open.append((tag, values.get("id")))

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self._open and (key := self._open[-1][1]):
            self.text_by_id[key] = self.text_by_id.get(key, "") + data

    def series(self, tag: str) -> set[str]:
        return {a["data-series"] for t, a in self.elements if t == tag and "data-series" in a}


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir) -> Iterator[ServerProcess]:
    if chromium.binary() is None:
        pytest.fail("no chromium: run scripts/setup.sh (it installs Debian's chromium)")
    data = tmp_path_factory.mktemp("dashboard-server")
    settings = {"ROLLGYM_DASHBOARD__INTERVAL_S": "0.5", "ROLLGYM_ENGINE__MAX_MODEL_LEN": "512"}
    with ServerProcess(model_dir=default_model_dir, data_dir=data, settings=settings) as server:
        with ServerClient(server.client_config()) as client:
            _drive(server, client, default_model_dir / "model.safetensors")
        time.sleep(1.0)  # a reading after the last step
        yield server


def _drive(server: ServerProcess, client: ServerClient, weights_file: Path) -> None:
    job = RolloutJob(
        env_id="rollgym/GuessNumber-v0",
        group_size=4,
        groups_per_batch=2,
        max_staleness=1,
        max_turns=4,
        sampling=SamplingSettings(temperature=1.0, max_tokens=8),
        drop_zero_variance=False,
    )
    client.start_rollouts(job)
    weights = weights_file.read_bytes()
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    for step in range(1, STEPS + 1):
        version = client.policy_version()
        request = PullRequest(trainer_version=version, max_staleness=1, num_groups=2, timeout_s=120)
        pulled = client.pull(request)
        assert pulled.groups
        started = time.time()
        client.ack([g.group_id for g in pulled.groups])
        result = client.push_weights(weights, expected_version=version)
        report = TrainerReport(
            step=step,
            at=time.time(),
            policy_version=result.policy_version,
            busy_spans=[(started, time.time())],
            alarms={
                "kl_behaviour": 0.001 * step,
                "entropy": 0.5,
                "grad_norm": 0.8,
                "step_kl": 0.002 * step,
            },
        )
        url = f"{server.url}/admin/dashboard/trainer"
        httpx.post(url, json=report.model_dump(), headers=admin, timeout=30).raise_for_status()
    client.stop_rollouts()


def test_the_page_shows_the_version_and_every_chart_with_data(server) -> None:
    page = Elements(chromium.dump_dom(f"{server.url}/dashboard"))
    assert page.text_by_id["policy-version"] == str(STEPS)
    assert page.text_by_id["trainer-step"] == str(STEPS)
    assert int(page.text_by_id["trajectories"]) >= STEPS * 2 * 4
    assert page.text_by_id["status"].startswith("live")
    lines = page.series("path")
    assert set(STAGES) <= lines  # the stage chart
    assert {"model p50", "ready groups", "sampled (server)", "stale"} <= lines
    alarm_series = {"KL behaviour||trainer", "entropy", "grad norm", "step KL (trust region)"}
    assert alarm_series <= lines  # the alarms chart
    assert {"model", "environment", "trajectories"} <= page.series("rect")  # latency, lag bars
    assert all(f"</span>{stage}</td>" in page.html for stage in STAGES)  # the totals table
    # the cost board: its figures, the savings, the speculation panel (off here)
    assert "<td>CPU-s per 1k generated tokens</td>" in page.html
    assert "<td>prefix cache</td>" in page.html and "<td>speculative decoding</td>" in page.html
    assert "ROLLGYM_ENGINE__SPECULATION__ENABLED" in page.html


def test_the_screenshot_is_a_rendered_page(server, tmp_path) -> None:
    png = chromium.screenshot(f"{server.url}/dashboard", tmp_path / "dashboard.png")
    image = Image.open(png).convert("RGB")
    assert image.size == (1400, 1250)
    colors = dict((rgb, count) for count, rgb in image.getcolors(maxcolors=1 << 24))
    assert len(colors) > 200  # text, lines and bars: not a blank page
    assert colors.get((0x4E, 0x79, 0xA7), 0) > 1000  # the sampling line and the model bars
    assert image.getpixel((5, 5)) == (0x1D, 0x23, 0x30)  # the header drew in its colour
    if target := os.environ.get("ROLLGYM_DASHBOARD_PNG"):
        shutil.copyfile(png, target)


TICKS_PAGE = """<html><body><input id="price"><span id="status"></span><pre id="out"></pre>
<script src="{script}"></script>
<script>
const answers = {{}};
for (const [name, lo, hi] of {cases}) {{
  try {{ answers[name] = ticks(lo, hi, 4); }} catch (error) {{ answers[name] = error.message; }}
}}
document.getElementById("out").textContent = JSON.stringify(answers);
</script></body></html>
"""


def test_axis_ticks_survive_spans_below_float_resolution(tmp_path) -> None:
    """A chart whose values differ by one ulp drew nothing: the tick loop never advanced.

    The page's ``ticks`` ran ``v += step`` with a step below the values' resolution until the
    array overflowed ("Invalid array length"), and the whole poll failed with it (CI saw
    "not updating: Invalid array length" on the real server's page).
    """
    script = Path(__file__).parents[2] / "server" / "dashboard" / "dashboard.js"
    cases = [
        ["ulp", 0.7, 0.7000000000000001],
        ["clock", 1764660000.5, 1764660000.5000002],
        ["denormal", 0, 5e-324],
        ["unit", 0, 1],
        ["seconds", 1764660000, 1764660060],
    ]
    page = tmp_path / "ticks.html"
    page.write_text(TICKS_PAGE.format(script=script.as_uri(), cases=json.dumps(cases)))
    out = Elements(chromium.dump_dom(page.as_uri(), budget_ms=1000)).text_by_id["out"]
    answers = json.loads(out)
    assert all(isinstance(ticks, list) and len(ticks) <= 17 for ticks in answers.values()), out
    assert answers["unit"] == [0, 0.25, 0.5, 0.75, 1]
    assert answers["seconds"] == [1764660000 + 20 * i for i in range(4)]
    assert answers["clock"] == [1764660000.5]


REWARDS_PAGE = """<html><body><input id="price"><span id="status"></span>
<svg id="chart" viewBox="0 0 400 200"></svg>
<script src="{script}"></script>
<script>lineChart(document.getElementById("chart"), {{xs: [0, 1], series: rewardSeries({rewards})}});
</script></body></html>
"""


@pytest.mark.parametrize("mixture", [False, True], ids=["one env", "mixture"])
def test_the_reward_chart_draws_each_env_of_a_mixture(tmp_path, mixture: bool) -> None:
    """The page's reward chart, in a browser, from the data a mixture's server answers."""
    per_env = [{"easy": 0.75, "hard": 0.25}, {"easy": 1.0}] if mixture else [{}, {}]
    rewards = [
        RewardPoint(policy_version=v, mean=0.5, count=4, per_env=part).model_dump()
        for v, part in enumerate(per_env)
    ]
    script = Path(__file__).parents[2] / "server" / "dashboard" / "dashboard.js"
    page = tmp_path / "rewards.html"
    page.write_text(REWARDS_PAGE.format(script=script.as_uri(), rewards=json.dumps(rewards)))
    drawn = Elements(chromium.dump_dom(page.as_uri(), budget_ms=1000)).series("path")
    assert drawn == ({"sampled (server)", "easy", "hard"} if mixture else {"sampled (server)"})
