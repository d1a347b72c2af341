"""Issue 31's smaller edges as pure functions: which folders a recorded project folder stands for
(``projects_db`` strips trailing whitespace), and which database a "database is locked" came from
(the hybrid worker reads both state.db and embeddings.db; the message must name the right one)."""

from __future__ import annotations

import os
import sqlite3
from types import SimpleNamespace

import pytest


def test_a_recorded_folder_that_exists_is_the_one_meant(phr, tmp_path):
    git = phr.module("projects.git")
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop ").mkdir()  # beside it, its name plus a space: stays outside
    assert git.registered_folders(str(tmp_path / "shop")) == [os.path.realpath(tmp_path / "shop")]


def test_a_recorded_folder_that_is_gone_stands_for_its_whitespace_spellings(phr, tmp_path):
    git = phr.module("projects.git")
    (tmp_path / "shop ").mkdir()
    (tmp_path / "shop\t").mkdir()
    (tmp_path / "shopping").mkdir()  # a longer name, not whitespace: not meant
    (tmp_path / " shop").mkdir()  # leading whitespace: projects_db strips that too, but rstrip only here
    (tmp_path / "shop   ").write_text("x")  # a file, not a folder
    expected = sorted(os.path.realpath(tmp_path / name) for name in ("shop ", "shop\t"))
    assert sorted(git.registered_folders(str(tmp_path / "shop"))) == expected


def test_a_recorded_folder_with_no_spelling_left_is_itself(phr, tmp_path):
    git = phr.module("projects.git")
    (tmp_path / "other").mkdir()
    gone = str(tmp_path / "gone")
    assert git.registered_folders(gone) == [os.path.realpath(gone)]
    assert git.registered_folders("") == [git.real_path("")]


class _LockedConnection:
    def execute(self, *args, **kwargs):
        raise sqlite3.OperationalError("database is locked")


def test_a_lock_met_reading_state_db_is_told_from_one_on_the_index(phr):
    semantic = phr.module("semantic")
    store = phr.module("store")
    db = store.HermesDB(env=None, conn=_LockedConnection(), schema=SimpleNamespace(session_columns=("id",)))
    with pytest.raises(sqlite3.OperationalError) as from_state:
        db.session("s1")
    assert store.is_busy(from_state.value)
    assert semantic.raised_by_state_db(from_state.value)

    with pytest.raises(sqlite3.OperationalError) as from_index:  # an IndexStore's read, say
        _LockedConnection().execute("SELECT 1 FROM chunks")
    assert not semantic.raised_by_state_db(from_index.value)
