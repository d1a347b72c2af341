"""Conversations the user asked the plugin to forget (``hermes project-history forget``, issue 32).

A forgotten conversation is left out of every scope (:meth:`scope.ProjectMap.resolve_scope` and
:meth:`~scope.ProjectMap.groups`), so keyword, semantic and hybrid search, the indexer and
``status`` all agree without a filter of their own. The list is recorded in the plugin's own
folder as ``forgotten.json``, not in Hermes's databases (spec: no writes to them but the move) and
not in ``embeddings.db``: it must work before ``setup`` (keyword mode, no numpy, no index), and
``revoke --purge`` deletes embeddings.db whole, which must not bring a forgotten conversation back.
docs/design.md, "Forgetting one conversation", says why.

A conversation is a compression chain (Hermes's ``parent_session_id`` lineage): it is recorded by
its first session, with every session it had then, so a session compressed later from it is
forgotten too, and naming any of its sessions undoes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..store import replace_private_file

FILE_NAME = "forgotten.json"
LOCK_NAME = "forgotten.lock"


class ForgottenUnreadable(Exception):
    """forgotten.json exists but cannot be read as a list: nothing is taken as remembered."""


def _parse(text: str, path: Path) -> dict[str, dict[str, Any]]:
    try:
        record = json.loads(text)
    except ValueError:
        raise ForgottenUnreadable(f"{path} is not valid JSON: fix or delete it") from None
    conversations = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(conversations, dict):
        raise ForgottenUnreadable(f"{path} has no 'conversations' object: fix or delete it")
    return {str(root): entry if isinstance(entry, dict) else {} for root, entry in conversations.items()}


def read_entries(data_dir: Path) -> dict[str, dict[str, Any]]:
    """Every forgotten conversation, by its first session: ``{"sessions": [...], "named": id,
    "forgotten_at": ...}``. An absent file is an empty list."""
    path = data_dir / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    return _parse(text, path)


def ids_of(entries: dict[str, dict[str, Any]]) -> frozenset[str]:
    """Every session id a forgotten entry names: the first sessions and each chain's members."""
    ids: set[str] = set(entries)
    for entry in entries.values():
        ids.update(str(sid) for sid in entry.get("sessions") or () if isinstance(sid, str))
    return frozenset(ids)


class ForgottenList:
    """The forgotten ids of one data folder, read again only when the file changes (its stat:
    a search pays one ``stat()`` for it). Owned by a :class:`scope.HomeState`."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE_NAME
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._ids: frozenset[str] = frozenset()

    def ids(self) -> frozenset[str]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return frozenset()
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp != self._stamp:
                # Unreadable: raised to the caller's boundary, never taken as "nothing forgotten".
                self._ids = ids_of(_parse(self.path.read_text(encoding="utf-8"), self.path))
                self._stamp = stamp
            return self._ids


def update(data_dir: Path, change: Callable[[dict[str, dict[str, Any]]], bool]) -> dict[str, dict[str, Any]]:
    """Read, change (in place; True: write) and atomically replace forgotten.json under its lock,
    so two ``forget`` runs never lose an entry. The file is 0600, as consent.json."""
    data_dir.mkdir(parents=True, exist_ok=True)
    # Never through a symbolic link (as semantic's lock files): a planted one is not followed.
    lock = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held for one small file's read and write
        entries = read_entries(data_dir)
        if change(entries):
            record = {"version": 1, "conversations": entries}
            replace_private_file(data_dir / FILE_NAME, json.dumps(record, indent=2) + "\n")
        return entries
    finally:
        os.close(lock)


def forget(data_dir: Path, chain: Sequence[str], named: str) -> bool:
    """Record the conversation ``chain`` (its sessions, oldest first); False: it already was."""
    root = chain[0]

    def add(entries: dict[str, dict[str, Any]]) -> bool:
        known = set(entries.get(root, {}).get("sessions") or ())
        if root in entries and set(chain) <= known:
            return False
        entries[root] = {
            "sessions": list(dict.fromkeys([*chain, *known])),
            "named": named,
            "forgotten_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        return True

    changed = [False]

    def change(entries: dict[str, dict[str, Any]]) -> bool:
        changed[0] = add(entries)
        return changed[0]

    update(data_dir, change)
    return changed[0]


def remember(data_dir: Path, session_ids: Iterable[str]) -> list[str]:
    """Drop every entry naming one of ``session_ids``; the first sessions of those dropped."""
    wanted = set(session_ids)
    dropped: list[str] = []

    def change(entries: dict[str, dict[str, Any]]) -> bool:
        for root in list(entries):
            if root in wanted or wanted & set(entries[root].get("sessions") or ()):
                del entries[root]
                dropped.append(root)
        return bool(dropped)

    update(data_dir, change)
    return dropped
