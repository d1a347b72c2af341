"""A scripted, OpenAI-compatible chat-completions server on 127.0.0.1 for end-to-end tests.

It speaks just enough of the protocol for Hermes 0.19.0 (hermes-notes §11): every
``POST .../chat/completions`` is answered with a Server-Sent-Events stream of
``chat.completion.chunk`` objects, ending with ``data: [DONE]``; a request with
``"stream": false`` gets one ``chat.completion`` object instead.

The script is one tool call, then text:

1. A request that offers ``tools``, whose last message is the user's and that does not yet
   carry our tool's result, is answered with a call to :attr:`FakeChatServer.tool_name`.
   The arguments are streamed in several fragments, then ``finish_reason: "tool_calls"``.
   If the tool is not offered, the problem is recorded and plain text is sent instead.
2. A request that carries, after its last user message, the ``tool`` message answering that
   call: its content (the handler's JSON) is recorded and a plain text answer is streamed.
3. Anything else (title generation, retries after the answer, ...) gets plain text.

The choice depends only on the request's messages, so retries get the same answer. Every
request body is recorded (:attr:`FakeChatServer.requests`), together with a human-readable
log (:meth:`FakeChatServer.dump`) for failure diagnostics.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback import LoopbackServer

MODEL = "fake-model"


@dataclass
class Recorded:
    """One HTTP request the server received, and what it chose to answer."""

    method: str
    path: str
    body: Any  # parsed JSON, or the raw text when it was not JSON, or None for GET
    reply: str = ""


def split_fragments(text: str, parts: int) -> list[str]:
    """``text`` cut into ``parts`` non-empty pieces (fewer if it is shorter) that join back to it."""
    parts = max(1, min(parts, len(text)))
    size, extra = divmod(len(text), parts)
    pieces, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def text_of(content: Any) -> str:
    """A message's content as text (a string, or a list of ``{"type": "text"}`` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and "text" in part
        )
    return "" if content is None else str(content)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


@dataclass
class FakeChatServer(LoopbackServer):
    """``with FakeChatServer(...) as server:`` serves on ``server.base_url`` until the block ends."""

    tool_name: str = "project_history_search"
    tool_arguments: dict[str, Any] = field(
        default_factory=lambda: {"query": "postgres migration", "mode": "keyword", "limit": 3}
    )
    answer: str = "Here is what I found in this project's history."
    fragments: int = 4

    requests: list[Recorded] = field(default_factory=list, init=False, repr=False)
    offered_tools: list[list[str]] = field(default_factory=list, init=False, repr=False)  # per chat request
    tool_results: list[str] = field(default_factory=list, init=False)  # our tool's message contents
    problems: list[str] = field(default_factory=list, init=False)
    outbound: list[str] = field(default_factory=list, init=False)  # proxied requests refused
    log: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        # Every call gets a fresh id: when a resumed conversation already held a call with the
        # same id, Hermes ran the tool but left the new call and its result out of the next request.
        self._call_ids: list[str] = []

    # ------------------------------------------------------------------ lifecycle

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one response per connection, closed at the end

            def log_message(self, format: str, *args: Any) -> None:
                server._note(f"http {self.address_string()} {format % args}")

            def do_GET(self) -> None:
                server._handle_get(self)

            def do_POST(self) -> None:
                server._handle_post(self)

            def do_CONNECT(self) -> None:
                server._refuse_proxy(self)

        return Handler

    @property
    def proxy_url(self) -> str:
        """For ``HTTP_PROXY``/``HTTPS_PROXY``: outbound requests end here, refused and recorded."""
        return f"http://127.0.0.1:{self.port}"

    def script(
        self,
        tool_name: str,
        tool_arguments: dict[str, Any],
        answer: str | None = None,
        fragments: int | None = None,
    ) -> None:
        """Script the next turn (a module-wide server serves several tests) and forget the last one."""
        with self._lock:
            self.tool_name = tool_name
            self.tool_arguments = dict(tool_arguments)
            if answer is not None:
                self.answer = answer
            if fragments is not None:
                self.fragments = fragments
            for recorded in (self.requests, self.offered_tools, self.tool_results, self.problems):
                recorded.clear()
            self.outbound.clear()
            self.log.clear()

    # ------------------------------------------------------------------ inspection

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                r.body
                for r in self.requests
                if r.method == "POST" and r.path.endswith("/chat/completions") and isinstance(r.body, dict)
            ]

    def body_answered_with(self, reply: str) -> dict[str, Any] | None:
        """The first request body that got ``reply`` ("tool_call", "answer", "text", "models")."""
        with self._lock:
            return next((r.body for r in self.requests if r.reply == reply), None)

    @property
    def tool_calls_sent(self) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.reply == "tool_call")

    def dump(self) -> str:
        """What the server saw and did, for a failing test's output (full bodies stay in
        :attr:`requests`; here each message is shortened, the system prompt most)."""
        with self._lock:
            lines = [*self.log, f"problems: {self.problems}", f"refused outbound: {self.outbound}"]
            for index, recorded in enumerate(self.requests):
                lines.append(f"[{index}] {recorded.method} {recorded.path} -> {recorded.reply}")
                body = recorded.body
                if not isinstance(body, dict) or "messages" not in body:
                    if body is not None:
                        lines.append(f"    body: {_short(json.dumps(body, ensure_ascii=False), 1000)}")
                    continue
                lines.append(
                    f"    model={body.get('model')!r} stream={body.get('stream')!r} "
                    f"tools={len(body.get('tools') or [])}"
                )
                for message in body["messages"]:
                    if not isinstance(message, dict):
                        continue
                    role = message.get("role")
                    limit = 160 if role == "system" else 1500
                    extra = ""
                    if message.get("tool_calls"):
                        extra += f" tool_calls={_short(json.dumps(message['tool_calls']), 600)}"
                    if message.get("tool_call_id"):
                        extra += f" tool_call_id={message['tool_call_id']}"
                    lines.append(f"    {role}:{extra} {_short(text_of(message.get('content')), limit)!r}")
        return "\n".join(lines)

    def _note(self, line: str) -> None:
        with self._lock:
            self.log.append(f"{time.strftime('%H:%M:%S')} {line}")

    # ------------------------------------------------------------------ HTTP

    def _refuse_proxy(self, handler: BaseHTTPRequestHandler) -> None:
        """Used as HTTP(S)_PROXY, the server refuses and records every attempt to leave 127.0.0.1."""
        with self._lock:
            self.outbound.append(f"{handler.command} {handler.path}")
        self._send_json(handler, 403, {"error": {"message": "no network in tests"}})

    def _handle_get(self, handler: BaseHTTPRequestHandler) -> None:
        if not handler.path.startswith("/"):  # an absolute URI: a plain-HTTP proxy request
            self._refuse_proxy(handler)
            return
        path = handler.path.split("?", 1)[0].rstrip("/")
        recorded = Recorded("GET", handler.path, None)
        with self._lock:
            self.requests.append(recorded)
        if path in ("/v1/models", "/api/v1/models", "/models"):
            recorded.reply = "models"
            model = {"id": MODEL, "key": MODEL, "object": "model", "owned_by": "fake", "created": 0}
            self._send_json(handler, 200, {"object": "list", "data": [model], "models": [model]})
        else:
            recorded.reply = "404"
            self._send_json(handler, 404, {"error": {"message": f"no route {path}"}})

    def _handle_post(self, handler: BaseHTTPRequestHandler) -> None:
        if not handler.path.startswith("/"):
            self._refuse_proxy(handler)
            return
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length).decode("utf-8", "replace") if length else ""
        try:
            body: Any = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw
        recorded = Recorded("POST", handler.path, body)
        with self._lock:
            self.requests.append(recorded)
        if not handler.path.split("?", 1)[0].rstrip("/").endswith("/chat/completions"):
            recorded.reply = "404"
            self._send_json(handler, 404, {"error": {"message": f"no route {handler.path}"}})
            return
        if not isinstance(body, dict):
            recorded.reply = "400"
            self._send_json(handler, 400, {"error": {"message": "body is not a JSON object"}})
            return

        reply, delta_script = self._decide(body)
        recorded.reply = reply
        finish = "tool_calls" if reply == "tool_call" else "stop"
        if body.get("stream"):
            self._send_stream(handler, body, delta_script, finish)
        else:
            self._send_json(handler, 200, self._completion(body, delta_script, finish))

    def _decide(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """What to answer, as a list of stream deltas (the non-stream reply is built from them)."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        offered = tool_names(body)
        with self._lock:
            self.offered_tools.append(offered)

        # Only this turn counts: a resumed conversation carries earlier turns' tool results.
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        turn = messages[users[-1] + 1 :] if users else messages
        with self._lock:
            ours = set(self._call_ids)
        results = [m for m in turn if m.get("role") == "tool" and m.get("tool_call_id") in ours]
        if results:
            with self._lock:
                self.tool_results.append(text_of(results[-1].get("content")))
            return "answer", self._text_deltas(self.answer)

        if offered and messages and messages[-1].get("role") == "user":
            if self.tool_name not in offered:
                with self._lock:
                    self.problems.append(f"{self.tool_name} not offered; tools were {offered}")
                return "text", self._text_deltas(f"The tool {self.tool_name} was not offered.")
            return "tool_call", self._tool_call_deltas()

        return "text", self._text_deltas("OK.")

    def _text_deltas(self, text: str) -> list[dict[str, Any]]:
        return [
            {"role": "assistant", "content": ""},
            *({"content": piece} for piece in split_fragments(text, 3)),
        ]

    def _new_call_id(self) -> str:
        with self._lock:
            self._call_ids.append(f"call_fake_{len(self._call_ids) + 1}")
            return self._call_ids[-1]

    def _tool_call_deltas(self) -> list[dict[str, Any]]:
        call_id = self._new_call_id()
        arguments = json.dumps(self.tool_arguments, ensure_ascii=False)
        deltas: list[dict[str, Any]] = [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": self.tool_name, "arguments": ""},
                    }
                ],
            }
        ]
        for piece in split_fragments(arguments, self.fragments):
            deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        return deltas

    # ------------------------------------------------------------------ replies

    @staticmethod
    def _send_json(handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)

    @staticmethod
    def _chunk(body: dict[str, Any], delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def _send_stream(
        self,
        handler: BaseHTTPRequestHandler,
        body: dict[str, Any],
        deltas: list[dict[str, Any]],
        finish: str,
    ) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        events = [self._chunk(body, delta, None) for delta in deltas]
        events.append(self._chunk(body, {}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": body.get("model") or MODEL,
                    "choices": [],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
            )
        try:
            for event in events:
                handler.wfile.write(f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode())
                handler.wfile.flush()
            handler.wfile.write(b"data: [DONE]\n\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError) as error:
            self._note(f"client went away mid-stream: {error!r}")

    def _completion(self, body: dict[str, Any], deltas: list[dict[str, Any]], finish: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": None}
        content = "".join(d.get("content") or "" for d in deltas)
        if content:
            message["content"] = content
        calls = [c for d in deltas for c in d.get("tool_calls") or []]
        if calls:
            message["tool_calls"] = [
                {
                    "id": calls[0]["id"],
                    "type": "function",
                    "function": {
                        "name": self.tool_name,
                        "arguments": "".join(c["function"].get("arguments", "") for c in calls),
                    },
                }
            ]
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
