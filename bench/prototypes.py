"""Structural variants tried without touching the plugin (monkeypatches, bench only).

``session`` fusion: the plugin fuses the keyword and semantic paths with RRF over *messages* and
then keeps each session's best message; this variant fuses the two paths' *session* rankings.
"""

from __future__ import annotations

from typing import Any


def install_session_fusion(search: Any) -> None:
    """Make ``search.fuse_rankings`` fuse *session* rankings (see :func:`session_fusion`)."""
    search.fuse_rankings = session_fusion(search.fuse_rankings)


def session_fusion(original: Any) -> Any:
    """``fuse_rankings`` over *session* rankings (RRF over each path's session order).

    Each path's messages are reduced to its sessions in order of first appearance; a session
    scores ``w/(k + rank)`` summed over the two paths. The rows returned are each session's best
    message under the plugin's own message-level fusion, in session-score order, so
    ``best_per_session`` and the result shape downstream are unchanged.
    """

    def fuse_rankings(keyword, semantic, k, keyword_weight=1.0, semantic_weight=1.0):
        by_message = original(keyword, semantic, k, keyword_weight, semantic_weight)
        scores: dict[str, float] = {}
        for rows, weight in ((keyword, keyword_weight), (semantic, semantic_weight)):
            order = list(dict.fromkeys(row["session_id"] for row in rows))
            for rank, session_id in enumerate(order, start=1):
                scores[session_id] = scores.get(session_id, 0.0) + weight / (k + rank)
        best: dict[str, dict] = {}
        for row in by_message:
            best.setdefault(row["session_id"], row)
        ordered = sorted(best.values(), key=lambda row: -scores[row["session_id"]])
        return [{**row, "score": scores[row["session_id"]]} for row in ordered]

    return fuse_rankings
