"""Stand-ins for the fast tier: a deterministic embedder, and a Hermes home built with Hermes's own
``SessionDB`` (never its CLI, never the plugin's ``register()``).

:class:`HashEmbedder` satisfies the plugin's embedder interface (``semantic/providers/base.py``'s
``Embedder``: ``fingerprint``, ``provider_seconds``, ``texts_embedded``, ``embed_documents``,
``embed_query``) the way an in-process model does (not ``paced``: the indexer sends its batches
as they are). A text's vector is its hashed bag of words: each lower-cased word adds one to the
column a digest of it picks, and the row is scaled to unit length. Texts sharing words are near,
texts sharing none are orthogonal (but for columns two words happen to share), and the same text
gives the same vector in every process: numpy and hashlib only, no model, no network.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

WORD = re.compile(r"\w+")


def column(word: str, dimensions: int) -> int:
    """The column a word counts in: a digest (not ``hash()``, which is salted per process)."""
    digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % dimensions


def bag_of_words(text: str, dimensions: int) -> np.ndarray:
    """A text's unit-length hashed word counts (all zeros for a text without a word)."""
    vector = np.zeros(dimensions, dtype=np.float32)
    for word in WORD.findall(text.lower()):
        vector[column(word, dimensions)] += 1.0
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


class HashEmbedder:
    """A deterministic embedder: hashed bag of words, L2-normalised.

    Besides the interface it records what it was asked: ``documents`` (every text, in order),
    ``batches`` (the size of each ``embed_documents`` call) and ``queries``.
    """

    paced = False  # like the in-process models: batches are sent as the indexer cuts them

    def __init__(self, dimensions: int = 2048, name: str = "bag-of-words", fingerprint: str = "") -> None:
        self.dimensions = dimensions
        digest = hashlib.sha256(f"{name}\n{dimensions}".encode()).hexdigest()[:16]
        #: As the real providers write it (``<provider>:<label>:<16 hex>``); ``fingerprint`` given:
        #: another width behind the same name, as when the model behind an endpoint changed.
        self.fingerprint = fingerprint or f"fake:{name}:{digest}"
        self.provider_seconds = 0.0
        self.texts_embedded = 0
        self.documents: list[str] = []
        self.batches: list[int] = []
        self.queries: list[str] = []
        self._lock = threading.Lock()

    def vector(self, text: str) -> np.ndarray:
        return bag_of_words(text, self.dimensions)

    def embed_documents(
        self, texts: Sequence[str], deadline: float | None = None, timeout: float | None = None
    ) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of strings, not one string")
        started = time.perf_counter()
        texts = [str(text) for text in texts]
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self.vector(text)
        with self._lock:
            self.documents.extend(texts)
            self.batches.append(len(texts))
            self.texts_embedded += len(texts)
            self.provider_seconds += time.perf_counter() - started
        return out

    def embed_query(self, text: str, deadline: float | None = None) -> np.ndarray:
        started = time.perf_counter()
        vector = self.vector(str(text))
        with self._lock:
            self.queries.append(str(text))
            self.provider_seconds += time.perf_counter() - started
        return vector


# --------------------------------------------------------------------------- a Hermes home


@dataclass
class History:
    """A Hermes home (``home``) whose ``state.db`` is written by Hermes's ``SessionDB``, with the
    folders of its projects under ``root``. ``sessions`` lists each folder's session ids, oldest
    first; ``ids`` maps a label given to a message to its id in state.db."""

    home: Path
    root: Path
    db: Any  # hermes_state.SessionDB
    sessions: dict[str, list[str]] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)
    clock: float = 1_700_000_000.0

    @classmethod
    def create(cls, home: Path, root: Path, blank: Path | None = None) -> History:
        """``blank``: an empty state.db SessionDB made before, copied in (writing Hermes's schema
        takes a tenth of a second or more; opening a made one, milliseconds)."""
        from hermes_state import SessionDB

        home.mkdir(parents=True, exist_ok=True)
        if blank is not None:
            shutil.copyfile(blank, home / "state.db")
        return cls(home=home, root=root, db=SessionDB(db_path=home / "state.db"))

    def clone(self, home: Path) -> History:
        """The same history in another home: its state.db copied (this one closed first, so the
        file holds every write), its folders and labels shared."""
        home.mkdir(parents=True, exist_ok=True)
        self.close()
        shutil.copyfile(self.home / "state.db", home / "state.db")
        from hermes_state import SessionDB

        return replace(
            self,
            home=home,
            db=SessionDB(db_path=home / "state.db"),
            sessions={project: list(ids) for project, ids in self.sessions.items()},
            ids=dict(self.ids),
        )

    def folder(self, name: str) -> str:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def _new_session(self, project: str) -> str:
        """An empty session whose cwd is ``project``'s folder, named ``<project>-NN``."""
        ids = self.sessions.setdefault(project, [])
        session_id = f"{project}-{len(ids) + 1:02d}"
        self.db.create_session(session_id, "cli", cwd=self.folder(project))
        ids.append(session_id)
        return session_id

    def session(self, project: str, messages: Iterable[tuple[str, str, str]] = ()) -> str:
        """A session in ``project``'s folder, with (label, role, text) messages appended one by one."""
        session_id = self._new_session(project)
        self.add(session_id, messages)
        return session_id

    def transcript(self, project: str, messages: Sequence[tuple[str, str, str]]) -> str:
        """The same, written in one transaction (``SessionDB.replace_messages``): for many messages,
        where a commit per message would cost a disk sync each."""
        session_id = self._new_session(project)
        rows = []
        for _, role, text in messages:
            self.clock += 60.0
            rows.append({"role": role, "content": text, "timestamp": self.clock})
        self.db.replace_messages(session_id, rows)
        stored = [m["id"] for m in self.db.get_messages(session_id)]
        for (label, _, _), message_id in zip(messages, stored, strict=True):
            if label:
                self.ids[label] = message_id
        return session_id

    def add(self, session_id: str, messages: Iterable[tuple[str, str, str]]) -> list[int]:
        added = []
        for label, role, text in messages:
            self.clock += 60.0
            message_id = self.db.append_message(session_id, role, text, timestamp=self.clock)
            if label:
                self.ids[label] = message_id
            added.append(message_id)
        return added

    def close(self) -> None:
        self.db.close()
