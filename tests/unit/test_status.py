"""command/status.py: what ``status`` says a project's semantic search can do (pure)."""

from __future__ import annotations

import pytest


@pytest.fixture
def project(phr):
    status = phr.module("command.status")

    def make(**fields):
        base = {"identity": {}, "conversations": 2, "messages": 4, "indexed": 4, "gate": "ok"}
        return status.ProjectStatus(**{**base, **fields})

    return make


def test_ready_only_for_all_of_it(project):
    assert project().state == "ready"
    assert project(indexed=3, busy=True).state == "indexing"
    assert project(indexed=3).state.startswith("partial: run ")
    assert project(indexed=3, skipped=1).state.startswith("complete except 1 skipped")


def test_an_index_that_cannot_be_read_is_never_ok(project):
    assert project(indexed=None).state == "unavailable"
    assert project(indexed=None, gate="consent_required").state == "consent_required"
    assert project(indexed=None, gate="disabled").state == "disabled"
