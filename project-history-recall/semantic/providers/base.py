"""What every embedding provider shares: the interface, the error, and how texts are prepared,
vectors normalised and models fingerprinted. Standard library only at import."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy

#: Characters kept per text. OpenAI's limit is 8192 tokens per input; at worst about one token per
#: character (CJK, code), so 8192 characters stays under it, and it is far above the plugin's
#: chunks (512 tokens by default). Local models truncate to their own token limit anyway.
MAX_INPUT_CHARS = 8192
#: Exponential backoff between retries: base * 2**attempt, capped, with the upper half jittered
#: Bumped when the way vectors are computed here changes, so stored vectors get re-embedded.
FINGERPRINT_VERSION = 1


class EmbeddingUnavailable(Exception):
    """The provider cannot embed now: down, misconfigured, rate-limited after retries, no runtime.

    Its message is built by this module from non-secret parts only and never contains the API key.
    """


class EmbeddingTimeout(EmbeddingUnavailable):
    """A paced request (``timeout`` given) got no answer in its time: the batch may be too large."""


class EmbeddingRejected(EmbeddingUnavailable):
    """A paced request was refused for what it sent (HTTP 400, 413, 422): one of its texts, maybe."""


@runtime_checkable
class Embedder(Protocol):
    """What the index and search need from a provider; see the module docstring for the rules."""

    fingerprint: str
    provider_seconds: float
    texts_embedded: int

    def embed_documents(
        self, texts: Sequence[str], deadline: float | None = None, timeout: float | None = None
    ) -> numpy.ndarray: ...

    def embed_query(self, text: str, deadline: float | None = None) -> numpy.ndarray: ...


# --------------------------------------------------------------------------- shared helpers


def prepare_texts(texts: Sequence[str], prefix: str) -> list[str]:
    """Bound, prefix and de-empty texts the same way for every provider (see module docstring)."""
    if isinstance(texts, str):
        raise TypeError("embed_documents takes a sequence of strings, not one string")
    out = []
    for text in texts:
        body = str(text)[:MAX_INPUT_CHARS]
        full = prefix + body
        out.append(full if full.strip() else " ")
    return out


def normalise(matrix: numpy.ndarray, where: str) -> numpy.ndarray:
    """Rows to unit length, so a dot product is a cosine whatever the model returns."""
    import numpy as np

    matrix = np.asarray(matrix, dtype=np.float32)
    if not np.all(np.isfinite(matrix)):
        raise EmbeddingUnavailable(f"{where} returned non-finite vector values")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def fingerprint_of(provider: str, label: str, parts: dict[str, Any]) -> str:
    """``<provider>:<label>:<16 hex>``: readable in status output, exact through the digest."""
    canonical = json.dumps(
        {"v": FINGERPRINT_VERSION, "provider": provider, **parts},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return f"{provider}:{label}:{hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:16]}"


class Counters:
    """Thread-safe ``provider_seconds``/``texts_embedded``: an indexer and a search share an embedder."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.provider_seconds = 0.0
        self.texts_embedded = 0

    def _account(self, seconds: float, texts: int) -> None:
        with self._lock:
            self.provider_seconds += seconds
            self.texts_embedded += texts

    @contextmanager
    def _running_in_process(self, where: str, texts: int) -> Iterator[None]:
        """An in-process model's run of ``texts`` texts: its time counted whatever happens, its
        texts once it succeeded, and any error of the model's library as one line naming ``where``
        (the search shows it as ``semantic_error``)."""
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            raise EmbeddingUnavailable(f"{where} failed: {type(exc).__name__}: {shorten(str(exc))}") from None
        finally:
            self._account(time.perf_counter() - started, 0)
        self._account(0.0, texts)


def shorten(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
