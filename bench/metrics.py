"""Session-level retrieval metrics and their markdown table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

ANY_AT = (1, 3, 5, 10)
ALL_AT = (5, 10)
COLUMNS = [f"any@{k}" for k in ANY_AT] + [f"all@{k}" for k in ALL_AT]


@dataclass
class Score:
    """Sums over questions; :meth:`row` turns them into rates."""

    questions: int = 0
    hits: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0))
    leaks: int | None = 0  # results from another project (must stay 0); None: not counted
    returned: int = 0  # results returned, over all questions

    def add(self, ranked: Sequence[str], gold: Iterable[str], own: set[str]) -> None:
        gold = set(gold)
        self.questions += 1
        self.returned += len(ranked)
        self.leaks = (self.leaks or 0) + sum(1 for sid in ranked if sid not in own)
        for k in ANY_AT:
            self.hits[f"any@{k}"] += bool(gold & set(ranked[:k]))
        for k in ALL_AT:
            self.hits[f"all@{k}"] += gold <= set(ranked[:k])

    def rate(self, column: str) -> float:
        return self.hits[column] / self.questions if self.questions else 0.0

    def row(self) -> dict[str, float]:
        return {c: self.rate(c) for c in COLUMNS}


def table(rows: Sequence[tuple[str, Score]], extra: dict[str, Sequence[str]] | None = None) -> str:
    """Markdown: one line per (label, score), the six metrics, leaks, and optional extra columns."""
    extra = extra or {}
    head = ["", *COLUMNS, "leaks", *extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for i, (label, score) in enumerate(rows):
        cells = [
            label,
            *(f"{score.rate(c):.3f}" for c in COLUMNS),
            "-" if score.leaks is None else str(score.leaks),
        ]
        cells += [values[i] for values in extra.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def dominates(candidate: dict[str, float], *others: dict[str, float], eps: float = 1e-9) -> bool:
    """Is ``candidate`` at least as good as every other on every metric?"""
    return all(candidate[c] + eps >= other[c] for other in others for c in COLUMNS)
