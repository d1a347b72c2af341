"""Fusion variants for comparison, built from the loaded plugin's own functions (bench only).

The plugin's ``search.fuse_rankings`` is what ``run_search`` calls for hybrid. Since commit
4017861 it fuses the two paths' *session* rankings, and the spec's message-level RRF (§4.4) lives
on as ``search.fuse_messages``. Older plugins had only the message-level ``fuse_rankings``; for
them ``session`` below is the prototype that became the plugin's fusion.

* ``message``: RRF over message ids, then each session's best message (spec §4.4).
* ``session``: RRF over each path's session order (first appearance), each session shown with
  its best message under message-level fusion.
"""

from __future__ import annotations

from typing import Any


def message_fusion(search: Any) -> Any:
    """The spec's message-level RRF of this plugin version."""
    return getattr(search, "fuse_messages", None) or search.fuse_rankings


def session_fusion(search: Any) -> Any:
    """Session-level RRF: the plugin's own when it has one, else the bench prototype."""
    if hasattr(search, "fuse_messages"):
        return search.fuse_rankings
    by_messages = search.fuse_rankings

    def fuse_rankings(keyword, semantic, k, keyword_weight=1.0, semantic_weight=1.0):
        scores: dict[str, float] = {}
        for rows, weight in ((keyword, keyword_weight), (semantic, semantic_weight)):
            order = list(dict.fromkeys(row["session_id"] for row in rows))
            for rank, session_id in enumerate(order, start=1):
                scores[session_id] = scores.get(session_id, 0.0) + weight / (k + rank)
        best: dict[str, dict] = {}
        for row in by_messages(keyword, semantic, k, keyword_weight, semantic_weight):
            best.setdefault(row["session_id"], row)
        ordered = sorted(best.values(), key=lambda row: (-scores[row["session_id"]], row["message_id"]))
        return [{**row, "score": scores[row["session_id"]]} for row in ordered]

    return fuse_rankings


FUSIONS = {"message": message_fusion, "session": session_fusion}


def install_fusion(search: Any, name: str) -> Any:
    """Make ``run_search`` use fusion ``name`` ("plugin": leave it); returns the previous function."""
    previous = search.fuse_rankings
    if name != "plugin":
        search.fuse_rankings = FUSIONS[name](search)
    return previous
