"""A session played through the Responses API is recorded as chat records it: the same
episode played both ways makes the same trajectory, token for token."""

from __future__ import annotations

from server_fakes import ADMIN

from rollgym.contract.wire import PullResponse

MODEL = "rollgym-tiny"
GUESS = "rollgym/GuessNumber-v0"


async def test_a_session_through_responses_records_what_chat_records(client) -> None:
    """The same episode played by chat completions (whole conversation each call) and by
    Responses (only the new items, after ``previous_response_id``): one trajectory."""
    by_chat = await _play(client, responses=False)
    by_responses = await _play(client, responses=True)
    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 0, "num_groups": 2, "timeout_s": 0},
        headers=ADMIN,
    )
    trajectories = {
        t.group_id: t for g in PullResponse.model_validate(pulled.json()).groups
        for t in g.trajectories
    }  # fmt: skip
    chat, responses = trajectories[by_chat], trajectories[by_responses]
    assert len(responses.turns) == 2 and responses.source == "session"
    assert responses.prompt_ids == chat.prompt_ids
    assert responses.completion_ids == chat.completion_ids
    assert responses.loss_mask == chat.loss_mask and responses.reward == chat.reward


async def _play(client, *, responses: bool) -> str:
    """Two turns of GuessNumber (seed 3) answered "5" twice; the session's id."""
    create = {"env_id": GUESS, "env_kwargs": {"low": 1, "high": 16}, "seed": 3}
    made = (await client.post("/v1/sessions", json=create)).json()
    session, header = made["session_id"], {"X-Rollgym-Session": made["session_id"]}
    conversation, new, previous = list(made["observation"]), list(made["observation"]), None
    for _ in range(2):
        if responses:
            body = {"model": MODEL, "input": new, "previous_response_id": previous}
            answer = (await client.post("/v1/responses", json=body, headers=header)).json()
            previous, text = answer["id"], answer["output"][0]["content"][0]["text"]
        else:
            body = {"model": MODEL, "messages": conversation}
            answer = (await client.post("/v1/chat/completions", json=body, headers=header)).json()
            text = answer["choices"][0]["message"]["content"]
        stepped = await client.post(f"/v1/sessions/{session}/step", json={"action": text})
        new = stepped.json()["observation"]
        conversation += [{"role": "assistant", "content": text}, *new]
    closed = await client.delete(f"/v1/sessions/{session}")
    assert closed.json()["persisted"], closed.text
    return session
