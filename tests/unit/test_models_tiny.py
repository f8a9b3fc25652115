import hashlib
from pathlib import Path

import pytest

from rollgym.models.tiny import ModelSpec, build_model, count_parameters, is_built

SMALL = ModelSpec.smallest()


def _digests(model_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(model_dir.iterdir())}


def test_same_seed_gives_identical_files(tmp_path: Path) -> None:
    a = build_model(SMALL, tmp_path / "a")
    b = build_model(SMALL, tmp_path / "b")
    assert _digests(a) == _digests(b)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(_digests(a))


def test_other_seed_gives_other_weights(tmp_path: Path) -> None:
    import dataclasses

    a = build_model(SMALL, tmp_path / "a")
    b = build_model(dataclasses.replace(SMALL, seed=1), tmp_path / "b")
    assert _digests(a)["model.safetensors"] != _digests(b)["model.safetensors"]


def test_default_spec_is_a_few_million_parameters(tmp_path: Path) -> None:
    out = build_model(ModelSpec(), tmp_path / "m")
    assert 1_000_000 <= count_parameters(out) <= 5_000_000
    assert is_built(ModelSpec(), out)
    assert not is_built(ModelSpec(seed=3), out)


def test_chat_template_round_trips_through_the_tokenizer(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build_model(SMALL, tmp_path / "m"))
    messages = [
        {"role": "system", "content": "Find the number."},
        {"role": "user", "content": "It is between 1 and 100. ünïcödé ✓"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nFind the number.<|im_end|>\n"
        "<|im_start|>user\nIt is between 1 and 100. ünïcödé ✓<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text  # byte-level BPE: lossless on any unicode
    assert tok.convert_ids_to_tokens(tok("517", add_special_tokens=False)["input_ids"]) == [
        "5",
        "1",
        "7",
    ]


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("num_attention_heads", 3, "multiple"),
        ("hidden_size", 96, "head dim"),
        ("vocab_size", 100, "vocab_size"),
    ],
)
def test_bad_spec_says_what_is_wrong(field: str, value: int, message: str) -> None:
    import dataclasses

    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SMALL, **{field: value})
