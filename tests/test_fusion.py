"""Hybrid fusion: RRF over each path's session order, represented by the session's best message."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture
def search(plugin):
    return importlib.import_module(f"{plugin.__name__}.search")


def rows(*pairs: tuple[str, int]) -> list[dict]:
    return [{"session_id": s, "message_id": m, "content": f"m{m}", "timestamp": 0} for s, m in pairs]


def test_a_session_found_by_both_paths_through_different_messages_adds_up(search):
    keyword = rows(("A", 1), ("B", 5), ("C", 7))
    semantic = rows(("C", 8), ("A", 2), ("D", 9))
    fused = search.fuse_rankings(keyword, semantic, k=5, keyword_weight=2.5, semantic_weight=1.0)
    # A: 2.5/6 + 1/7; C: 2.5/8 + 1/6; B: 2.5/7; D: 1/8.
    assert [r["session_id"] for r in fused] == ["A", "C", "B", "D"]
    assert [r["score_source"] for r in fused] == ["both", "both", "keyword", "semantic"]
    assert fused[0]["message_id"] == 1  # A's best message: its keyword hit ranks first
    assert abs(fused[0]["score"] - (2.5 / 6 + 1 / 7)) < 1e-12
    # Message-level fusion (the spec's) cannot join A's two messages: each counts alone.
    by_message = search.fuse_messages(keyword, semantic, k=5, keyword_weight=2.5, semantic_weight=1.0)
    assert {r["score_source"] for r in by_message} == {"keyword", "semantic"}


def test_zero_weight_leaves_one_path_in_charge(search):
    fused = search.fuse_rankings(rows(("A", 1)), rows(("B", 2), ("A", 3)), k=5, keyword_weight=0)
    assert [r["session_id"] for r in fused] == ["B", "A"]
