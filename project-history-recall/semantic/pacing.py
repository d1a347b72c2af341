"""How an indexer paces its requests to an endpoint whose speed it does not know. Pure: the
caller measures time and passes it in.

* **Batch size**: starts at ``batch_size``; a batch the endpoint could not answer in time (or
  refused for its content) is halved, down to one text; after :data:`GROW_AFTER` answers in a
  row it doubles again, up to ``batch_size``. A size that failed right after growing waits twice
  as many answers before the next try (at most :data:`MAX_GROW_AFTER`), so an endpoint that
  only copes with 8 texts costs one timeout now and then, not one in every five requests.
* **Timeout**: ``timeout_seconds`` until the endpoint has answered; then the larger of that and
  :data:`TIMEOUT_MARGIN` times what the endpoint's measured pace (seconds per estimated token,
  a moving average) predicts for the batch's tokens, capped at :data:`MAX_TIMEOUT_SECONDS`. A slow
  CPU endpoint gets the time a long batch needs; a hung one is still noticed.
* **Alone**: a text that fails alone is tried ``max_retries + 1`` times (each try with twice the
  time of the one before), then skipped and recorded. :data:`SKIP_STREAK` texts failing alone in a
  row without one answer between them is the endpoint failing, not the texts: the run ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GROW_AFTER = 4
MAX_GROW_AFTER = 64
TIMEOUT_MARGIN = 3.0
MAX_TIMEOUT_SECONDS = 600.0
SKIP_STREAK = 3
#: Weight of the newest answer in the pace's moving average.
PACE_WEIGHT = 0.3


@dataclass
class Pacing:
    limit: int  # the configured batch_size
    timeout_seconds: float = 20.0
    max_retries: int = 2
    size: int = 0  # texts in the next batch
    grow_after: int = GROW_AFTER
    seconds_per_token: float | None = None
    _answers: int = 0  # in a row, at this size
    _just_grew: bool = False
    _failed_alone: int = 0  # texts in a row that failed alone (no answer between)
    _tries: dict[object, int] = field(default_factory=dict)  # per text: failed tries alone

    def __post_init__(self) -> None:
        self.limit = max(1, int(self.limit))
        self.size = self.size or self.limit

    @classmethod
    def of(cls, embedding: object) -> Pacing:
        return cls(
            limit=getattr(embedding, "batch_size", 32),
            timeout_seconds=getattr(embedding, "timeout_seconds", 20.0),
            max_retries=getattr(embedding, "max_retries", 2),
        )

    def timeout(self, tokens: int, key: object = None) -> float:
        """Seconds a request of ``tokens`` estimated tokens may take (a text retried alone: more)."""
        seconds = self.timeout_seconds
        if self.seconds_per_token is not None:
            seconds = max(seconds, TIMEOUT_MARGIN * self.seconds_per_token * max(tokens, 1))
        seconds *= 2 ** self._tries.get(key, 0) if key is not None else 1
        return min(seconds, MAX_TIMEOUT_SECONDS)

    def answered(self, tokens: int, seconds: float, keys: tuple[object, ...] = ()) -> None:
        """A batch (of these texts) was embedded in ``seconds``."""
        for key in keys:
            self._tries.pop(key, None)
        pace = max(seconds, 0.0) / max(tokens, 1)
        old = self.seconds_per_token
        self.seconds_per_token = pace if old is None else (1 - PACE_WEIGHT) * old + PACE_WEIGHT * pace
        self._failed_alone = 0
        self._answers += 1
        self._just_grew = False
        if self._answers >= self.grow_after and self.size < self.limit:
            self.size = min(self.limit, self.size * 2)
            self._answers = 0
            self._just_grew = True

    def failed(self) -> None:
        """A batch of more than one text timed out or was refused: halve."""
        if self._just_grew:
            self.grow_after = min(MAX_GROW_AFTER, self.grow_after * 2)
        self._just_grew = False
        self._answers = 0
        self.size = max(1, self.size // 2)

    def failed_alone(self, key: object) -> bool:
        """A text failed alone: True when it is to be skipped (its tries are used up).

        Raises :class:`EndpointFailing` when :data:`SKIP_STREAK` texts in a row were skipped."""
        self._answers = 0
        self._just_grew = False
        self.size = 1
        tries = self._tries.get(key, 0) + 1
        if tries <= self.max_retries:
            self._tries[key] = tries
            return False
        self._tries.pop(key, None)
        self._failed_alone += 1
        if self._failed_alone >= SKIP_STREAK:
            raise EndpointFailing(self._failed_alone)
        return True


class EndpointFailing(Exception):
    """Several texts in a row failed alone: the endpoint, not the texts."""

    def __init__(self, texts: int) -> None:
        super().__init__(f"{texts} texts in a row failed alone")
        self.texts = texts


#: Texts put in length order together: batches of one length pad little, and the order still
#: follows recency closely.
ORDER_WINDOW = 256


def embedding_order(todo: list, recency: dict[str, int], window: int = ORDER_WINDOW) -> list:
    """``todo`` items ``((session, message, chunk), text, hash)`` in the order they are embedded:
    the most recently active sessions first (``recency``: a session's newest message id), so a
    partial index already covers what is searched most; within each run of ``window`` texts the
    shortest first (a local model pads every text of a batch to the longest)."""
    by_recency = sorted(todo, key=lambda item: (-recency.get(item[0][0], 0), item[0][1], item[0][2]))
    ordered: list = []
    for start in range(0, len(by_recency), window):
        ordered.extend(sorted(by_recency[start : start + window], key=lambda item: len(item[1])))
    return ordered
