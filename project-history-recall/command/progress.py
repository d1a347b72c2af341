"""Progress for ``hermes project-history index``: advanced per embedded batch, with rate and ETA.

``semantic.build_index`` reports its totals before and after its loop only; the batches go through
``embedder.embed_documents``. :meth:`IndexProgress.track` wraps the embedder so that every batch
it embeds advances the bar. The rate is the endpoint's over the last minute of answers (a slow
start, a timeout or a model load does not weigh on it for the rest of a long run), and the ETA
follows from it. On a terminal the bar is Rich's; otherwise (a pipe, a log) one plain
line is printed per tenth of the work, so a long index is visible there too.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

#: Seconds of answers the rate is measured over.
RATE_WINDOW = 60.0


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class _Counting:
    """The embedder as ``build_index`` sees it; each ``embed_documents`` batch advances the bar."""

    def __init__(self, owner: IndexProgress, label: str, embedder: Any) -> None:
        self._owner, self._label, self._embedder = owner, label, embedder
        self.done, self.started = 0, time.monotonic()
        self.total: int | None = None  # until build_index reports it
        self._task = owner._add(label)
        self._samples: deque[tuple[float, int]] = deque()  # (when, done) over the last RATE_WINDOW

    def __getattr__(self, name: str) -> Any:  # fingerprint, texts_embedded, provider_seconds...
        return getattr(self._embedder, name)

    def embed_documents(self, texts: Sequence[str], deadline: float | None = None, **options: Any) -> Any:
        vectors = self._embedder.embed_documents(texts, deadline=deadline, **options)
        self.done += len(texts)
        now = time.monotonic()
        self._samples.append((now, self.done))
        while len(self._samples) > 2 and self._samples[1][0] < now - RATE_WINDOW:
            self._samples.popleft()
        self._owner._update(self)
        return vectors

    def embed_query(self, text: str, deadline: float | None = None) -> Any:
        return self._embedder.embed_query(text, deadline=deadline)

    def report(self, done: int, total: int) -> None:
        """``build_index``'s own callback: the number of chunks to embed, and the final count."""
        if self.total is None:
            self.started = time.monotonic()
            self._samples = deque([(self.started, self.done)])
        self.total = total
        self.done = max(self.done, done)
        self._owner._update(self)

    def rate(self) -> float | None:
        """Chunks per second over the last :data:`RATE_WINDOW` of answers."""
        if len(self._samples) < 2:
            return None
        (first, done_then), (last, done_now) = self._samples[0], self._samples[-1]
        return (done_now - done_then) / (last - first) if last > first and done_now > done_then else None

    def eta(self) -> float | None:
        rate = self.rate()
        if not rate or self.total is None:
            return None
        return max(self.total - self.done, 0) / rate


class IndexProgress:
    def __init__(self, stream: Any = None) -> None:
        self._stream = stream or sys.stdout
        self._rich: Any = None
        self._tenths: dict[int, int] = {}

    def __enter__(self) -> IndexProgress:
        if self._stream.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.text import Text

            class RateColumn(ProgressColumn):
                def render(self, task: Any) -> Text:
                    speed = task.fields.get("rate")
                    return Text(f"{speed:.1f} chunks/s" if speed else "-- chunks/s")

            class EtaColumn(ProgressColumn):
                def render(self, task: Any) -> Text:
                    return Text(_clock(task.fields.get("eta")))

            self._rich = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                RateColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                EtaColumn(),
            )
            self._rich.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._rich is not None:
            self._rich.__exit__(*exc)

    def track(self, label: str, embedder: Any) -> _Counting:
        return _Counting(self, label, embedder)

    def _add(self, label: str) -> Any:
        return self._rich.add_task(label, total=None) if self._rich is not None else None

    def _update(self, counting: _Counting) -> None:
        if self._rich is not None:
            self._rich.update(
                counting._task,
                completed=counting.done,
                total=counting.total,
                rate=counting.rate(),
                eta=counting.eta(),
            )
            return
        total = counting.total
        if not total:
            return
        tenth = min(counting.done * 10 // total, 10)
        key = id(counting)
        if self._tenths.get(key) == tenth:
            return
        self._tenths[key] = tenth
        rate = counting.rate()
        print(
            f"{counting._label}: {counting.done}/{total} chunks"
            f"  {f'{rate:.1f}' if rate else '--'} chunks/s  ETA {_clock(counting.eta())}",
            file=self._stream,
            flush=True,
        )
