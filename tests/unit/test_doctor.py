"""``rollgym doctor``'s checks, each failing for the reason it is for: a chat template that
drops an earlier turn's reasoning or is not append-only, one whose tool calls the parsers
cannot read back, a context too small for the turns, logprobs that disagree, an env that
cannot be made. The default model passes. The real twin (vLLM and a sandboxed env):
tests/e2e/test_doctor_e2e.py."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from rollgym.cli import main
from rollgym.doctor.checks import (
    PROBE_CONVERSATION,
    PROBE_TOOL,
    context_fits,
    logprob_agreement,
    template_prefix,
    tool_round_trip,
)
from rollgym.doctor.report import DoctorConfig, DoctorFailed, doctor, preflight
from rollgym.envs.toolformats import ToolCallParser
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.rollout.budget import ContextBudget

OPENING, TURNS = PROBE_CONVERSATION
HERMES = ToolCallParser("hermes")
CONTENT = "{{ message['content'] }}"


def codec_with(model_dir, edit) -> ChatCodec:
    """The default model's codec, its chat template passed through ``edit``."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = edit(tokenizer.chat_template)
    return ChatCodec(tokenizer)


def test_the_default_template_keeps_the_prefix_and_round_trips_tool_calls(codec) -> None:
    assert template_prefix(codec, OPENING, TURNS).status == "pass"
    assert template_prefix(codec, OPENING, TURNS, [PROBE_TOOL]).status == "pass"
    check = tool_round_trip(codec, [PROBE_TOOL], HERMES)
    assert (check.status, check.reason) == (
        "pass",
        'python({"code": "print(1 + 1)"}) rendered and parsed back (hermes parser)',
    )


def test_a_template_that_drops_earlier_reasoning_breaks_the_prefix(default_model_dir) -> None:
    drops = (
        "{% if message['role'] == 'assistant' and not loop.last %}"
        "{{ message['content'].split('</think>')[-1] }}{% else %}" + CONTENT + "{% endif %}"
    )
    codec = codec_with(default_model_dir, lambda t: t.replace(CONTENT, drops))
    check = template_prefix(codec, OPENING, TURNS)
    assert check.status == "fail"
    assert check.reason.startswith("turn 1: token ") and "'istant\\n<think'" in check.reason


def test_a_template_that_rewrites_earlier_turns_fails_the_prefix(default_model_dir) -> None:
    codec = codec_with(default_model_dir, lambda t: "{{ messages | length }}" + t)
    check = template_prefix(codec, OPENING, TURNS)
    assert check.status == "fail" and "append-only" in check.reason


def test_tool_calls_in_a_format_the_parsers_cannot_read_fail(default_model_dir) -> None:
    mistral = codec_with(
        default_model_dir,
        lambda t: t.replace(
            "\n<tool_call>{{ call['function'] | tojson }}</tool_call>",
            "[TOOL_CALLS]{{ call['function'] | tojson }}",
        ),
    )
    check = tool_round_trip(mistral, [PROBE_TOOL], HERMES)
    assert check.status == "fail"
    assert "[TOOL_CALLS]" in check.reason and "the envs read []" in check.reason


def test_the_round_trip_reads_with_the_servers_parser_of_the_models_family(codec) -> None:
    """The default model writes Hermes calls: vLLM's pythonic parser reads none of them."""
    check = tool_round_trip(codec, [PROBE_TOOL], ToolCallParser("pythonic", codec.tokenizer))
    assert check.status == "fail" and "the server (pythonic parser) reads []" in check.reason


def test_the_doctor_names_a_tool_parser_the_models_tokenizer_cannot_serve(
    default_model_dir,
) -> None:
    config = DoctorConfig(model_dir=default_model_dir, logprobs=False, tool_parser="llama3_json")
    [tools] = [c for c in doctor(config).checks if c.name == "tool calls round-trip"]
    assert tools.status == "fail" and "'llama3_json' tool parser cannot read" in tools.reason


def test_a_template_that_renders_no_tool_call_passes_with_the_reason(default_model_dir) -> None:
    silent = codec_with(
        default_model_dir, lambda t: t.replace("message.get('tool_calls')", "false")
    )
    check = tool_round_trip(silent, [PROBE_TOOL], HERMES)
    assert check.status == "pass" and "renders no tool call" in check.reason


def test_the_context_check_fails_when_the_turns_do_not_fit() -> None:
    fits = ContextBudget(prompt=40, max_turns=3, max_tokens=8, env_tokens=12, max_model_len=128)
    cut = ContextBudget(prompt=40, max_turns=6, max_tokens=16, env_tokens=12, max_model_len=128)
    assert context_fits(fits).status == "pass"
    failed = context_fits(cut)
    assert failed.status == "fail" and "need 208 tokens; the context holds 128" in failed.reason


def test_logprobs_agree_within_the_tolerance_only() -> None:
    close = logprob_agreement([-1.0, -2.0], [-1.001, -2.0], prompts=1, tolerance=0.02)
    assert close.status == "pass"
    far = logprob_agreement([-1.0, -2.0], [-1.0, -2.5], prompts=1, tolerance=0.02)
    assert far.status == "fail" and "largest |difference| 0.5" in far.reason
    assert logprob_agreement([], [], prompts=1, tolerance=0.02).status == "fail"


def test_the_default_model_on_guess_number_passes_every_check(default_model_dir) -> None:
    report = doctor(DoctorConfig(model_dir=default_model_dir, env_id="rollgym/GuessNumber-v0",
                                 logprobs=False))  # fmt: skip
    statuses = {check.name: check.status for check in report.checks}
    assert report.ok and statuses == {
        "chat template keeps the token prefix": "pass",
        "tool calls round-trip": "skip",  # GuessNumber has no tools
        "context fits max turns x max tokens": "pass",
        "env plays": "pass",
        "sandbox image and pool answer": "skip",  # nor a sandbox
        "trainer and server logprobs agree": "skip",
    }


def test_preflight_raises_with_the_table_when_the_context_is_too_small(
    default_model_dir,
) -> None:
    config = DoctorConfig(
        model_dir=default_model_dir,
        env_id="rollgym/GuessNumber-v0",
        max_model_len=64,
        logprobs=False,
    )
    printed: list[str] = []
    with pytest.raises(DoctorFailed) as failed:
        preflight(config, printed.append)
    assert printed == [str(failed.value)]
    lines = str(failed.value).splitlines()
    assert lines[-1] == "1 check failed"
    (context,) = [line for line in lines if line.startswith("context fits")]
    assert context.split()[7] == "fail"


def test_an_env_that_cannot_be_made_fails_its_check(default_model_dir) -> None:
    report = doctor(DoctorConfig(model_dir=default_model_dir, env_id="rollgym/GuessNumber-v0",
                                 env_kwargs={"no_such_kwarg": 1}, logprobs=False))  # fmt: skip
    (env,) = [check for check in report.checks if check.name == "env plays"]
    assert not report.ok and env.status == "fail" and "no_such_kwarg" in env.reason


def test_the_command_exits_1_on_a_failed_check_and_2_on_bad_input(
    default_model_dir, tmp_path, capsys
) -> None:
    model = str(default_model_dir)
    args = ["doctor", model, "rollgym/GuessNumber-v0", "--no-logprobs"]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "every check passes"
    assert main([*args, "--max-model-len", "64"]) == 1
    assert main(["doctor", str(tmp_path), "--no-logprobs"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"rollgym doctor: no model at {tmp_path} (no config.json)"
    )
    assert main([*args, "--env-kwargs", "[1]"]) == 2
