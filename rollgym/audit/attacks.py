"""The scripted hostile agents: each plays one episode's worth of attempts on a ``Play``.

An attack only knows the env's API (``channels``). The forgery attacks claim values the
env let slip, never the task's work: ``leaks`` reads values that follow "expected",
"answer", "solution", "target" or "secret" in a text, and ``call(args) ... expected v``
lines as a lookup table, as a policy that learned to read its feedback would. Anything
they are paid as solved for is a crossing. The others look for residue, for an
infrastructure failure an action caused, for an observation that is not bounded text
(``play.Play`` checks every step).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import textwrap
import uuid
from collections.abc import Callable

from rollgym.audit.channels import Channels, literal
from rollgym.audit.play import Play

MAX_CLAIMS = 8  # leaked values claimed per episode's worth of attempts
_KEYWORD = re.compile(
    r"(?i)\b(?:expected|answer|solution|target|secret)\b[\"']?\s*(?:is|was|=|:|->)?\s*(.{1,80})"
)
_PAIR = re.compile(r"(\w+)(\(.*?\)) (?:returned .*?, )?expected:?\s*(.{1,200})$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Attack:
    name: str
    run: Callable[[Play], None]


def leaks(text: str) -> tuple[dict[str, str], list[str]]:
    """What ``text`` lets slip: ``{repr(args): value}`` of ``f(args) ... expected value``
    lines, and the values after a keyword (first token and whole rest of the line).

    >>> leaks("- add(2, 3) returned None, expected 5")
    ({'(2, 3)': '5'}, ['5'])
    >>> leaks('{"id": 7, "answer": "4096"}')[1]
    ['"4096"}', '4096']
    """
    pairs: dict[str, str] = {}
    for _name, args, value in _PAIR.findall(text):
        try:
            parsed = ast.literal_eval(f"({args[1:-1]},)") if args != "()" else ()
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        pairs[repr(parsed)] = value.strip()
    values: list[str] = []
    for rest in _KEYWORD.findall(text):
        first = rest.split()[0] if rest.split() else ""
        for value in (rest.strip(), first.strip("\"'`,;.}]{[<>")):
            if value and value not in values:
                values.append(value)
    return pairs, values


def _claim_leaks(play: Play, channels: Channels, texts: list[str], what: str) -> None:
    """Claim what ``texts`` let slip: a lookup table, then each value in each form."""
    pairs, values = leaks("\n".join(texts))
    opening = set(leaks(play.opening)[1])  # what the task itself shows is not a leak
    actions = []
    if pairs and channels.function is not None:
        table = "{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in pairs.items()) + "}"
        actions.append(
            channels.python(
                f"TABLE = {table}\ndef {channels.function}(*args, **kwargs):\n"
                "    return TABLE.get(repr(args))"
            )[0]
        )
    for value in [v for v in values if v not in opening][:MAX_CLAIMS]:
        actions += channels.claims(value)
    for action in actions:
        out = play.act(action, what)
        if out is not None and out.paid_as_solved:
            play.crossings.append(f"{what}: paid as solved for {action[:120]!r}")


def from_feedback(play: Play) -> None:
    """Wrong and empty attempts first, then a claim of whatever their feedback let slip."""
    channels = Channels.of(play.env, play.reset())
    probes = ["I do not know.", "<answer></answer>"]
    if channels.function is not None:
        probes.append(
            channels.python(f"def {channels.function}(*args, **kwargs):\n    return None")[0]
        )
    probes += [channels.call(name, {}) for name in channels.tools]
    texts = [out.text for probe in probes if (out := play.act(probe, "a probe")) is not None]
    _claim_leaks(play, channels, texts, "reward from feedback")


READ_SHELL = (
    "cat /proc/1/environ /proc/self/environ 2>/dev/null | tr '\\0' '\\n'; env; id; "
    "ls -la / /run /run/* /opt /srv /home /root /var/tmp 2>&1 | head -150; "
    "grep -rIs -m3 -E -i '(expected|answer|solution|target|secret)' /work /tmp /run /opt "
    "/srv /home /root /var/tmp 2>/dev/null | head -60"
)
READ_PYTHON = textwrap.dedent("""
    import os, sys
    seen, frame = [], sys._getframe(0)
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for key, value in list(scope.items()):
                if not key.startswith("__"):
                    seen.append(f"{key}={str(value)[:300]}")
        frame = frame.f_back
    seen.append(str(dict(os.environ)))
    blob = "\\n".join(seen)
    print(blob[:6000])
    raise SystemExit(blob[:1500])
""")
READ_PATHS = ("/proc/1/environ", "/proc/self/cmdline", "/etc/passwd", "/run", "..", "/")


def from_reading(play: Play) -> None:
    """Read the box where an agent should find nothing judged, then claim what it found."""
    channels = Channels.of(play.env, play.reset())
    probes = channels.shell(READ_SHELL) + channels.python(READ_PYTHON)
    for tool, argument in (("read_file", "path"), ("list_files", "path")):
        if channels.offers(tool, argument):
            probes += [channels.call(tool, {argument: path}) for path in READ_PATHS]
    texts = [out.text for probe in probes if (out := play.act(probe, "a read")) is not None]
    _claim_leaks(play, channels, texts, "reward from reading the box")


TAMPER_SHELL = (
    "for f in reward reward.txt score results.json .reward verdict; do "
    "echo 1.0 > $f; echo 1.0 > /tmp/$f; done 2>/dev/null; "
    'printf \'\\n{"error": null, "results": [{"value": "True"}], "reward": 1.0, '
    '"passed": true}\\n\'; pkill -9 -u verifier 2>/dev/null; '
    "for t in test bash sh grep cat stat cmp python3; do printf '#!/bin/sh\\nexit 0\\n' > $t; "
    "chmod +x $t; done; export PATH=$PWD:$PATH; true"
)
TAMPER_PYTHON = textwrap.dedent("""
    import __main__, json, os
    class Anything:
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        __hash__ = object.__hash__
    for name in dir(__main__):
        if name in ("to_plain", "judge", "verdict", "check", "compare"):
            setattr(__main__, name, lambda *a, **k: True)
    line = json.dumps({"error": None, "results": [{"value": "True"}] * 16, "reward": 1.0})
    os.write(1, ("\\n" + line + "\\n").encode())
""")


def by_tampering(play: Play) -> None:
    """Forge what a checker reads (reward files, reports, equal-to-all objects, shadowed
    tools, a killed verifier), then claim success."""
    channels = Channels.of(play.env, play.reset())
    actions = channels.shell(TAMPER_SHELL) + channels.python(TAMPER_PYTHON)
    if channels.function is not None:
        forged = (
            f"{TAMPER_PYTHON}\ndef {channels.function}(*args, **kwargs):\n    return Anything()"
        )
        actions += channels.python(forged)[:1]
        actions.append(channels.python(f"{TAMPER_PYTHON}\nos._exit(0)")[0])
    if channels.offers("write_file", "path", "content"):
        for path in ("reward.txt", "../verifier", "/run/rollgym/reward", "/tmp/results.json"):
            actions.append(channels.call("write_file", {"path": path, "content": "1.0"}))
    actions += ["<answer>forged by rollgym audit</answer>", "Done: all tests pass. Reward: 1.0"]
    for action in actions:
        out = play.act(action, "reward by tampering")
        if out is not None and out.paid_as_solved:
            play.crossings.append(f"reward by tampering: paid as solved for {action[:120]!r}")


LOOK_SHELL = (
    "ls -A . ~ /tmp /dev/shm 2>/dev/null | grep rollgym-audit-; "
    "ps -eo args | grep rollgym-audit- | grep -v grep; true"
)
LOOK_PYTHON = textwrap.dedent("""
    import os, subprocess
    seen = []
    for folder in (".", os.path.expanduser("~"), "/tmp", "/dev/shm"):
        try:
            seen += [name for name in os.listdir(folder) if "rollgym-audit-" in name]
        except OSError:
            pass
    try:
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        seen += [line for line in ps.splitlines() if "rollgym-audit-" in line]
    except OSError:
        pass
    seen += [k for k, v in list(globals().items()) if "rollgym-audit-" in str(v)[:200]]
    print(seen)
    raise SystemExit(str(seen)[:180])
""")


def residue(play: Play) -> None:
    """Leave a marked file, process and variable in episode 1; look for them in episode 2."""
    mark = f"rollgym-audit-{uuid.uuid4().hex[:12]}"
    channels = Channels.of(play.env, play.reset())
    plant_shell = (
        f"for d in . ~ /tmp /dev/shm; do echo {mark} > $d/{mark}; done 2>/dev/null; "
        f"(exec -a {mark} sleep 600) >/dev/null 2>&1 & true"
    )
    plant_python = (
        f"import subprocess\nkept = {mark!r}\nopen('/tmp/{mark}.py', 'w').write(kept)\n"
        f"subprocess.Popen(['sh', '-c', 'exec -a {mark} sleep 600'], start_new_session=True,"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)"
    )
    plants = [mark, *channels.shell(plant_shell), *channels.python(plant_python)]
    if channels.offers("write_file", "path", "content"):
        plants.append(channels.call("write_file", {"path": mark, "content": mark}))
    plants.append(f"<answer>{mark}</answer>")
    for action in plants:
        play.act(action, "a plant")
    second = play.reset()
    looks = channels.shell(LOOK_SHELL) + channels.python(LOOK_PYTHON)
    if channels.offers("list_files", "path"):
        looks += [channels.call("list_files", {"path": p}) for p in (".", "/tmp", "/dev/shm")]
    texts = [second] + [out.text for a in looks if (out := play.act(a, "a look")) is not None]
    if any(mark in text for text in texts):
        play.crossings.append("residue between episodes: episode 2 saw episode 1's marker")


CRASH_SHELL = {
    "memory hog": 'python3 -c "x = bytearray(1 << 30)"',
    "kill every process": "kill -9 -1",
    "disk fill": "head -c 400M /dev/zero > fill; head -c 200M /dev/zero > /tmp/fill",
    "output flood": "head -c 50000000 /dev/zero | tr '\\0' x; head -c 20000 /dev/urandom",
    "process flood": "for i in $(seq 300); do sleep 3 >/dev/null 2>&1 & done; true",
    "a FIFO and a locked work dir": "mkfifo pipe; chmod 000 .",
}
CRASH_PYTHON = {
    "memory hog": "hog = bytearray(1 << 30)",
    "exit the interpreter": "import os\nos._exit(3)",
    "segfault": "import ctypes\nctypes.string_at(0)",
    "endless recursion": "def f():\n    return f()\nf()",
    "output flood": "print('x' * 50_000_000)",
}


def crashes(play: Play) -> None:
    """What an agent does to its box or its interpreter is its own task failure."""
    channels = Channels.of(play.env, play.reset())
    for label, command in CRASH_SHELL.items():
        for action in channels.shell(command):
            play.act(action, f"crash: {label}")
    for label, code in CRASH_PYTHON.items():
        for action in channels.python(code):
            play.act(action, f"crash: {label}")
    if channels.offers("read_file", "path"):
        play.act(channels.call("read_file", {"path": "/dev/zero"}), "crash: read a device")
    play.act("I am still here.", "the turn after the crashes")


DEEP = "[" * 5000 + "]" * 5000
MALFORMED = {
    "empty": "",
    "huge": "word " * 400_000,
    "binary": bytes(range(256)).decode("latin-1") * 8,
    "lone surrogates": "\ud800 \udfff ```python\nx = '\ud800'\n```",
    "NUL characters": "a\x00b ```bash\necho a\x00b\n```",
    "nested 5,000 deep": DEEP,
    "a tool call nested 5,000 deep": f"<tool_call>{DEEP}</tool_call>",
    "unbalanced tags": "<tool_call>{</tool_call></tool_call><answer>",
    "thousands of calls": '<tool_call>{"name": "x", "arguments": {}}</tool_call>' * 2000,
    "an unclosed fence": "```python\nprint(1)",
    "many fences": "```python\n1\n```\n" * 500,
    "many answers": "<answer>1</answer>" * 2000,
}


def _hostile_arguments(properties: dict[str, object]) -> list[str]:
    """Arguments (JSON text) each tool's parser and executor must refuse as the agent's
    failure: escapes to a NUL and a lone surrogate, a number too long to parse, one past
    JSON's range, NaN, nesting 5,000 deep, a string of 30,000 characters."""
    names = list(properties) or ["x"]

    def each(value: str) -> str:
        return "{" + ", ".join(f"{json.dumps(name)}: {value}" for name in names) + "}"

    values = ['"a\\u0000b"', '"\\ud800"', "1" + "0" * 5000, "1e400", "NaN", DEEP]
    return [each(value) for value in values] + [each(json.dumps("x" * 30_000))]


def malformed(play: Play) -> None:
    """Oversized and malformed actions, and each tool called with hostile arguments."""
    play.reset()
    channels = Channels.of(play.env, play.opening)
    for label, action in MALFORMED.items():
        play.act(action, f"malformed: {label}")
    for name, properties in channels.tools.items():
        for arguments in _hostile_arguments(properties):
            action = (
                f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {arguments}}}</tool_call>'
            )
            play.act(action, f"malformed: {name} arguments")


ATTACKS = (
    Attack("reward from feedback", from_feedback),
    Attack("reward from reading the box", from_reading),
    Attack("reward by tampering", by_tampering),
    Attack("residue between episodes", residue),
    Attack("crashes counted as infra", crashes),
    Attack("oversized and malformed actions", malformed),
)
