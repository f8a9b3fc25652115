"""Fixtures of the unit tests that run the server app in-process on a fake engine.

A test module that needs another engine or app defines its own fixture of the same name,
which takes precedence over these.
"""

from __future__ import annotations

import pytest
import torch
from server_fakes import engine_factory, in_process, settings

from rollgym.engine.fake import FakeEngine
from rollgym.server.app import create_app
from rollgym.server.conversation.codec import ChatCodec


@pytest.fixture(params=["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
def device(request) -> torch.device:
    """Each torch device of this host: the CPU, and CUDA where a GPU answers (the trainer's
    own tensor code runs on both; TRL's training runs on CUDA there by itself)."""
    return torch.device(request.param)


@pytest.fixture(scope="module")
def codec(default_model_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(default_model_dir)


@pytest.fixture
def engine(codec) -> FakeEngine:
    """A fake engine whose every reply is "5" and the end of the turn."""
    return FakeEngine(lambda prompt: [*codec.encode("5"), codec.eos_id])


@pytest.fixture
async def client(tmp_path, engine):
    """The whole app in-process on ``engine`` (no sandbox pool), over httpx."""
    app = create_app(settings(tmp_path), engine_factory=engine_factory(engine))
    async with in_process(app) as client:
        yield client
