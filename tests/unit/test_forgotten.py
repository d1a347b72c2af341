"""projects/forgotten.py: the forgotten list in the plugin's folder (issue 32 part 3)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def forgotten(phr):
    return phr.module("projects.forgotten")


def test_a_chain_is_recorded_whole_and_undone_by_any_of_its_sessions(forgotten, tmp_path):
    assert forgotten.read_entries(tmp_path) == {}
    assert forgotten.forget(tmp_path, ["s1", "s2"], "s2")
    assert not forgotten.forget(tmp_path, ["s1", "s2"], "s1")  # already: the file is unchanged
    assert forgotten.forget(tmp_path, ["s1", "s2", "s3"], "s3")  # the chain grew
    assert forgotten.ids_of(forgotten.read_entries(tmp_path)) == {"s1", "s2", "s3"}
    assert os.stat(tmp_path / forgotten.FILE_NAME).st_mode & 0o777 == 0o600
    assert forgotten.remember(tmp_path, ["nope"]) == []
    assert forgotten.remember(tmp_path, ["s3"]) == ["s1"]
    assert forgotten.read_entries(tmp_path) == {}


def test_the_list_is_read_again_only_when_the_file_changes(forgotten, tmp_path):
    cached = forgotten.ForgottenList(tmp_path)
    assert cached.ids() == frozenset()
    forgotten.forget(tmp_path, ["a"], "a")
    assert cached.ids() == {"a"}
    forgotten.forget(tmp_path, ["b", "c"], "c")
    assert cached.ids() == {"a", "b", "c"}
    forgotten.remember(tmp_path, ["a"])
    assert cached.ids() == {"b", "c"}


@pytest.mark.parametrize("text", ["{not json", '{"conversations": []}', "[]"])
def test_an_unreadable_file_is_never_taken_as_nothing_forgotten(forgotten, tmp_path, text):
    (tmp_path / forgotten.FILE_NAME).write_text(text)
    with pytest.raises(forgotten.ForgottenUnreadable, match="fix or delete it"):
        forgotten.ForgottenList(tmp_path).ids()
    with pytest.raises(forgotten.ForgottenUnreadable):
        forgotten.forget(tmp_path, ["a"], "a")  # nor overwritten, losing what it listed
