"""fulltext/reader.py's lookups around a matched row (turn_openers, answer_windows,
own_tool_results, session_titles) over a state.db written by Hermes's own SessionDB: sessions
written interleaved, as a gateway writes concurrent chats, so that a walk in id order that left
its session, or ran past its first or last row, would show."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

OWN = ("project_history_search", "project_session_move")


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    ]


@pytest.fixture
def rows(phr, tmp_path, blank_state_db):
    """Two sessions of one project written turn by turn in turns, and what each row's id is."""
    from unit.fakes import History

    history = History.create(tmp_path / "home", tmp_path / "work", blank_state_db)
    a, b = history.session("proj"), history.session("proj")
    db = history.db
    ids: dict[str, int] = {}

    def put(label: str, session: str, role: str, content: str | None, **extra: Any) -> None:
        history.clock += 60.0
        ids[label] = db.append_message(session, role, content, timestamp=history.clock, **extra)

    put("b_tool_first", b, "tool", "output before any user message", tool_name="terminal", tool_call_id="b0")
    put("a_user", a, "user", "the migration fails with a duplicate column")
    put("b_user", b, "user", "rotate the stripe keys")
    put("a_call", a, "assistant", "", tool_calls=_call("a1", "terminal", {"command": "alembic upgrade head"}))
    put("b_call", b, "assistant", "", tool_calls=_call("b1", "read_file", {"path": "config/keys.yaml"}))
    put("a_tool", a, "tool", "sqlite3.OperationalError: duplicate column name: owner", tool_call_id="a1")
    put("b_tool", b, "tool", "stripe_live_key: in the vault", tool_name="read_file", tool_call_id="b1")
    put("a_blank", a, "assistant", " " * 100 + "\n")
    put("a_reply", a, "assistant", " " * 100 + "Dropped the duplicate column in the migration.")
    put("b_reply", b, "assistant", "The keys live in the vault.")
    put("a_user2", a, "user", "and the login timeout?")
    put("b_recall", b, "assistant", "", tool_calls=_call("b2", "project_history_search", {"query": "stripe"}))
    put("b_result", b, "tool", json.dumps({"results": [{"link": "@session:x"}]}), tool_call_id="b2")
    put("a_recall", a, "assistant", "", tool_calls=_call("a2", "project_history_search", {"query": "x"}))
    put("a_result", a, "tool", "{}", tool_name="project_history_search", tool_call_id="a2")
    history.db.set_session_title(a, "数据库迁移报错 duplicate column")
    history.db.set_session_title(b, "Stripe keys")
    history.close()
    env = phr.store.HermesEnv(home=history.home, profile="default", config={})
    with phr.store.HermesDB.open(env) as opened:
        yield phr.module("fulltext.reader").FullTextReader(opened), ids, (a, b)


def test_tool_rows_named_or_not_are_credited_to_the_user_message_of_their_own_turn(rows):
    reader, ids, _ = rows
    openers = reader.turn_openers([ids[k] for k in ("a_call", "a_tool", "b_call", "b_tool")], OWN)
    assert {k: openers[ids[k]][0] for k in ("a_call", "a_tool")} == dict.fromkeys(
        ("a_call", "a_tool"), ids["a_user"]
    )
    assert {k: openers[ids[k]][0] for k in ("b_call", "b_tool")} == dict.fromkeys(
        ("b_call", "b_tool"), ids["b_user"]
    )


def test_a_row_before_its_sessions_first_user_message_has_no_opener(rows):
    reader, ids, _ = rows
    assert reader.turn_openers([ids["b_tool_first"]], OWN) == {}


def test_the_plugins_own_calls_and_results_named_or_not_open_no_turn(rows):
    reader, ids, _ = rows
    own = [ids[k] for k in ("b_recall", "b_result", "a_recall", "a_result")]
    assert reader.turn_openers(own, OWN) == {}


def test_the_answer_is_the_last_words_of_the_turn_in_its_own_session(rows):
    reader, ids, _ = rows
    windows = reader.answer_windows([ids["a_user"], ids["b_user"], ids["b_reply"], ids["a_user2"]])
    assert windows[ids["a_user"]] == (
        "assistant",
        " " * 100 + "Dropped the duplicate column in the migration.",
    )
    assert windows[ids["b_user"]] == ("assistant", "The keys live in the vault.")
    assert windows[ids["b_reply"]] == ("user", "rotate the stripe keys")
    assert ids["a_user2"] not in windows  # the session ends with no words after it


def test_own_results_are_read_from_the_sessions_that_hold_them_only(rows):
    reader, _, (a, b) = rows
    found = reader.own_tool_results([a, b], "project_history_search", 10, 20)
    assert sorted(found) == sorted([(b, '{"results": [{"link"'), (a, "{}")])
    assert reader.own_tool_results([a], "project_session_move", 10, 20) == []


def test_titles_are_counted_in_the_same_read_that_returns_the_holding_ones(rows):
    reader, _, (a, b) = rows
    total, holding, titles = reader.session_titles([a, b], ["duplicate", "stripe", "vault"])
    assert (total, holding, sorted(titles)) == (
        2,
        [1, 1, 0],
        sorted([(a, "数据库迁移报错 duplicate column"), (b, "Stripe keys")]),
    )
    assert reader.session_titles([a, b], ["nothing"]) == (0, [0], [])


def test_titles_the_scope_read_with_its_rows_are_matched_as_sqlite_lowercases(rows, phr):
    reader, _, (a, b) = rows
    lower = phr.store.sqlite_lower
    written = {a: "数据库迁移报错 duplicate column", b: "Stripe keys", "elsewhere": "stripe"}
    given = phr.module("fulltext.reader").FullTextReader(
        reader.db, titles={sid: (title, lower(title)) for sid, title in written.items()}
    )
    needles = ["duplicate", "stripe", "vault"]
    assert given.session_titles([a, b], needles) == reader.session_titles([a, b], needles)
    accented = phr.module("fulltext.reader").FullTextReader(
        reader.db, titles={a: ("ÜBER Stripe", lower("ÜBER Stripe"))}
    )
    assert accented.session_titles([a, b], ["über", "stripe"]) == (1, [0, 1], [(a, "ÜBER Stripe")])


def test_sqlite_lower_is_sqlites_own_lower(phr):
    texts = ["ÜBER Stripe", "数据库 DB", "ǅ Σ İ ß", "MiXeD_Case-42"]
    with sqlite3.connect(":memory:") as conn:
        assert [phr.store.sqlite_lower(t) for t in texts] == [
            conn.execute("SELECT lower(?)", (t,)).fetchone()[0] for t in texts
        ]


def test_a_title_only_conversation_is_shown_by_its_first_live_user_words(rows):
    reader, ids, (a, b) = rows
    first = reader.first_user_messages([a, b, "no-such-session"])
    assert {sid: first[sid][0] for sid in first} == {a: ids["a_user"], b: ids["b_user"]}
