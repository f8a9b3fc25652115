"""rollgym.data: deduplication, filters, the chat format, the export schema read back."""

from __future__ import annotations

import json
import time

import pytest
from server_fakes import ADMIN, engine_factory, guessing_script, in_process, settings

from rollgym.contract.archive import ArchivePage
from rollgym.contract.chat import ChatRecord, chat_record, read_jsonl, template_messages
from rollgym.contract.wire import EnvMessage, Trajectory, TurnRecord
from rollgym.data.curate import CurateConfig, curate
from rollgym.data.dedup import Deduplicator, MinHasher, actions, exact_key
from rollgym.data.export import write_export
from rollgym.data.rows import row_of
from rollgym.data.sources import items_of
from rollgym.engine.fake import FakeEngine
from rollgym.server.app import create_app
from rollgym.server.conversation.codec import ChatCodec

CALL = '<tool_call>{"name": "python", "arguments": {"code": "print(6 * 7)"}}</tool_call>'


def trajectory(
    actions_: list[list[int]],
    *,
    prompt: tuple[int, ...] = (1, 2, 3),
    reward: float = 1.0,
    valid: bool = True,
    messages: list[dict[str, str]] | None = None,
    tools: list[dict[str, object]] | None = None,
) -> Trajectory:
    completion, mask = [], []
    for action in actions_:
        completion += [*action, 99]  # the model's tokens, then one env token
        mask += [1] * len(action) + [0]
    return Trajectory(
        id=f"t{time.perf_counter_ns()}",
        group_id="g",
        env_id="test/Env-v0",
        task_seed=7,
        prompt_ids=list(prompt),
        completion_ids=completion,
        logprobs=[-0.5 if m else 0.0 for m in mask],
        loss_mask=mask,
        reward=reward,
        terminated=True,
        truncated=False,
        valid=valid,
        invalid_reason=None if valid else "docker died",
        min_version=2,
        max_version=3,
        turns=[
            TurnRecord(
                index=0, policy_version=2, context_tokens=3, completion_tokens=1, env_tokens=1
            )
        ],
        created_at=1.0,
        messages=[EnvMessage(**m) for m in messages or []],
        tools=tools,
    )


# --- dedup ---------------------------------------------------------------------------------


def test_exact_keys_tell_token_ids_apart() -> None:
    assert exact_key([1, 2], [3]) == exact_key([1, 2], [3])
    assert exact_key([1, 2], [3]) != exact_key([1], [2, 3])  # the cut between them counts


def test_actions_are_the_model_runs() -> None:
    assert actions([5, 6, 99, 7, 99], [1, 1, 0, 1, 0]) == [[5, 6], [7]]


def test_minhash_estimates_jaccard() -> None:
    hasher = MinHasher(num_perm=256)
    base = list(range(100, 200))
    near = [*base[:95], 1, 2, 3, 4, 5]  # 92 of 103 shingles shared: J ~ 0.85
    far = list(range(500, 600))
    a, b, c = (hasher.signature([x]) for x in (base, near, far))
    assert MinHasher.similarity(a, b) > 0.7
    assert MinHasher.similarity(a, c) < 0.1


def test_dedup_drops_exact_and_near_duplicates_and_keeps_the_first() -> None:
    dedup = Deduplicator()
    long = list(range(10, 60))
    kept = [
        dedup.keep([1], [*long, 99], [1] * 50 + [0]),
        dedup.keep([1], [*long, 99], [1] * 50 + [0]),  # exact
        dedup.keep([1], [*long[:-1], 7, 99], [1] * 50 + [0]),  # one token differs: near
        dedup.keep([2], [*long, 99], [1] * 50 + [0]),  # another prompt: its own scope
        dedup.keep([1], [*range(300, 350), 99], [1] * 50 + [0]),  # different actions
    ]
    assert kept == [True, False, False, True, True]
    assert (dedup.exact_dropped, dedup.near_dropped) == (1, 1)


def test_global_scope_compares_across_prompts() -> None:
    dedup = Deduplicator(scope="all")
    long = list(range(10, 60))
    assert dedup.keep([1], long, [1] * 50)
    assert not dedup.keep([2], long, [1] * 50)


def test_bands_must_divide_the_signature() -> None:
    with pytest.raises(ValueError, match="bands"):
        Deduplicator(bands=7)


# --- filters -------------------------------------------------------------------------------


def test_curation_filters_then_deduplicates() -> None:
    items = [
        (trajectory([[5]], reward=1.0), "generated"),
        (trajectory([[5]], reward=1.0), "generated"),  # exact duplicate
        (trajectory([[6]], reward=0.0), "generated"),  # below min_reward
        (trajectory([[7]], reward=1.0, valid=False), "invalid"),  # invalid
        (trajectory([[8]], reward=0.5), "trained"),
    ]
    rows, report = curate(items, CurateConfig(min_reward=0.5))
    assert [r.completion_ids for r in rows] == [[5, 99], [8, 99]]
    assert (report.seen, report.filtered, report.exact_duplicates, report.kept) == (5, 2, 1, 2)
    rows, _ = curate(items, CurateConfig(valid_only=False, exact_dedup=False, near_dedup=False))
    assert len(rows) == 5


def test_reward_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="min_reward"):
        CurateConfig(min_reward=1, max_reward=0)


# --- the chat format -----------------------------------------------------------------------


def test_tool_calls_become_openai_tool_calls_and_back() -> None:
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "6*7?"},
        {"role": "assistant", "content": f"Let me compute.{CALL}"},
        {"role": "tool", "content": "42\n"},
        {"role": "tool", "content": "Unbalanced tool-call tags."},  # no call waits: a user turn
        {"role": "assistant", "content": "<answer>42</answer>"},
    ]
    record = chat_record(messages, tools=[{"type": "function", "function": {"name": "python"}}])
    turns = record.messages
    assert turns[2].content == "Let me compute."
    [call] = turns[2].tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "python",
        {"code": "print(6 * 7)"},
    )
    assert (turns[3].role, turns[3].tool_call_id) == ("tool", call.id)
    assert turns[4].role == "user"
    assert template_messages(record)[2]["content"] == messages[2]["content"]


def test_a_malformed_call_stays_text() -> None:
    record = chat_record([{"role": "assistant", "content": "<tool_call>{oops</tool_call>"}])
    assert record.messages[0].tool_calls is None
    assert record.messages[0].content == "<tool_call>{oops</tool_call>"


# --- export --------------------------------------------------------------------------------


def test_the_export_loads_back_with_datasets(tmp_path) -> None:
    from datasets import load_dataset, load_from_disk

    with_tools = trajectory(
        [[5]],
        messages=[
            {"role": "user", "content": "6*7?"},
            {"role": "assistant", "content": CALL},
            {"role": "tool", "content": "42"},
        ],
        tools=[{"type": "function", "function": {"name": "python", "parameters": {}}}],
    )
    plain = trajectory([[6, 7]], reward=0.0, messages=[{"role": "user", "content": "hi"}])
    bare = trajectory([[8]])  # recorded before messages were: no chat record
    rows = [row_of(with_tools, "trained"), row_of(plain, "generated"), row_of(bare, "stale")]
    result = write_export(rows, tmp_path / "out")
    assert (result.rows, result.chat_records) == (3, 2)

    dataset = load_from_disk(str(tmp_path / "out" / "dataset"))
    parquet = load_dataset("parquet", data_files=str(tmp_path / "out" / "data.parquet"))["train"]
    for loaded in (dataset, parquet):
        assert loaded.num_rows == 3
        first = loaded[0]
        assert first["completion_ids"] == [5, 99] and first["loss_mask"] == [1, 0]
        assert (first["policy_version"], first["max_policy_version"]) == (2, 3)
        assert (first["env_id"], first["task_seed"], first["reward"]) == ("test/Env-v0", 7, 1.0)
        assert first["valid"] and first["outcome"] == "trained"
        assert first["messages"][1]["tool_calls"][0]["function"]["name"] == "python"
        assert json.loads(first["tools"])[0]["function"]["name"] == "python"
    chats = read_jsonl(tmp_path / "out" / "chat.jsonl")
    assert [len(c.messages) for c in chats] == [3, 1]
    line = json.loads((tmp_path / "out" / "chat.jsonl").read_text().splitlines()[0])
    assert set(line) == {"messages", "tools"}  # the OpenAI format, nothing else
    assert "content" not in line["messages"][1]  # a call-only message: no content key
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["rows"] == 3


def test_an_empty_export_has_the_schema(tmp_path) -> None:
    from datasets import load_from_disk

    write_export([], tmp_path / "out", ["dataset"])
    assert "completion_ids" in load_from_disk(str(tmp_path / "out" / "dataset")).features


def test_chat_records_refuse_unknown_keys() -> None:
    with pytest.raises(ValueError):
        ChatRecord.model_validate({"messages": [{"role": "user", "content": "x"}], "meta": 1})


# --- from the server -----------------------------------------------------------------------


async def test_a_rollout_is_recorded_as_text_and_read_back_from_the_archive(
    tmp_path, default_model_dir
) -> None:
    codec = ChatCodec.from_model_dir(default_model_dir)
    engine = FakeEngine(guessing_script(codec))
    app = create_app(settings(tmp_path), engine_factory=engine_factory(engine))
    job = {
        "env_id": "rollgym/GuessNumber-v0",
        "group_size": 2,
        "groups_per_batch": 1,
        "drop_zero_variance": False,
    }
    async with in_process(app) as client:
        await client.post("/admin/rollouts", json=job, headers=ADMIN)
        pulled = await client.post(
            "/admin/buffer/pull",
            json={"trainer_version": 0, "max_staleness": 1, "num_groups": 1, "timeout_s": 10},
            headers=ADMIN,
        )
        await client.delete("/admin/rollouts", headers=ADMIN)
        [group] = pulled.json()["groups"]
        await client.post(
            "/admin/buffer/ack", json={"group_ids": [group["group_id"]]}, headers=ADMIN
        )
        answer = await client.get("/admin/archive", params={"limit": 5}, headers=ADMIN)
        refused = await client.get("/admin/archive")
    assert refused.status_code == 401
    page = ArchivePage.model_validate(answer.json())
    [(first, outcome), _] = list(items_of([page]))
    assert outcome == "trained"
    roles = [m.role for m in first.messages]
    assert roles[:3] == ["system", "user", "assistant"]
    assert roles.count("assistant") == len(first.turns)
    assert first.messages[2].content == codec.decode(first.completion_ids[: _model_run(first)])


def _model_run(trajectory: Trajectory) -> int:
    return trajectory.loss_mask.index(0) if 0 in trajectory.loss_mask else len(trajectory.loss_mask)


# --- the SFT warm start reads the same format --------------------------------------------


def test_warm_start_demonstrations_go_through_the_chat_format(tmp_path, default_model_dir) -> None:
    from rollgym.contract.chat import write_jsonl
    from rollgym.envs.guess_demos import demonstrations
    from rollgym.run.demos import GuessDemos
    from rollgym.run.warmstart import (
        WarmStartConfig,
        demonstration_records,
        sft_examples,
        tokenize_conversation,
    )

    codec = ChatCodec.from_model_dir(default_model_dir)
    [conversation] = demonstrations(1, seed=3, low=1, high=8, max_turns=3)
    direct = tokenize_conversation(codec, conversation)
    via_record = tokenize_conversation(codec, template_messages(chat_record(conversation)))
    assert via_record == direct

    path = tmp_path / "chat.jsonl"
    write_jsonl([chat_record(conversation)], path)
    base = WarmStartConfig(demos=GuessDemos(oracle_episodes=2, imperfect_episodes=0))
    extra = base.model_copy(update={"demonstrations": path})
    assert len(demonstration_records(extra)) == len(demonstration_records(base)) + 1
    assert direct in sft_examples(extra, codec)
    assert base.fingerprint() != extra.fingerprint()


def test_a_records_tools_are_in_its_sft_prompt(tmp_path, default_model_dir) -> None:
    from rollgym.contract.chat import write_jsonl
    from rollgym.envs.tool_use import TOOLS
    from rollgym.run.demos import ComputeDemos
    from rollgym.run.warmstart import WarmStartConfig, sft_examples

    codec = ChatCodec.from_model_dir(default_model_dir)
    tools = [TOOLS[0].to_openai()]
    opening = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "1+1?"}]
    conversation = [*opening, {"role": "assistant", "content": "<answer>2</answer>"}]
    path = tmp_path / "chat.jsonl"
    write_jsonl([chat_record(conversation, tools=tools)], path)
    config = WarmStartConfig(
        demos=ComputeDemos(episodes=0, copies=0, drills=0), demonstrations=path
    )
    [example] = sft_examples(config, codec)
    prompt = codec.first_prompt(opening, tools=tools)  # what the episode runner shows
    assert example["input_ids"][: len(prompt)] == prompt
    assert prompt != codec.first_prompt(opening)


def test_an_assistant_message_of_weight_0_is_context_only(default_model_dir) -> None:
    from rollgym.run.warmstart import tokenize_conversation

    codec = ChatCodec.from_model_dir(default_model_dir)
    opening = [{"role": "system", "content": "Guess."}, {"role": "user", "content": "Go."}]
    turns = [
        {"role": "assistant", "content": "5", "weight": 0},
        {"role": "user", "content": "Lower."},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "Correct!"},
    ]
    back = template_messages(chat_record(opening + turns))
    assert [m.get("weight") for m in back] == [None, None, 0, None, None, None]  # kept
    weighted = tokenize_conversation(codec, back)
    plain = tokenize_conversation(
        codec, [{k: v for k, v in m.items() if k != "weight"} for m in back]
    )
    assert weighted["input_ids"] == plain["input_ids"]
    trained = [i for i, m in enumerate(plain["assistant_masks"]) if m]
    kept = [i for i, m in enumerate(weighted["assistant_masks"]) if m]
    guess_5 = len(codec.encode("5")) + 1  # its tokens and the end of turn
    assert kept == trained[guess_5:]  # the first guess is no longer trained on
