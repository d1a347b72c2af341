"""Issue 30.3: a result carries what answers its message (the reply after a matched question, the
question a matched reply answered), through the real dispatcher and real SessionDB sessions."""

from __future__ import annotations

import json

from credentials import OPENAI_OLD
from harness import session_ids

FIX = "Fixed: the pool was exhausted, so I raised pool_size to 20 in db.py and the timeouts stopped."


def _call(name: str, arguments: dict) -> list[dict]:
    return [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    ]


def test_how_did_we_fix_shows_the_fix_after_the_error(world):
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    old = world.session(
        repo,
        [
            ("user", "The checkout page throws TimeoutError: QueuePool limit of size 5 overflow reached"),
            ("assistant", FIX),
            ("user", "thanks, now the blog styles please"),
            ("assistant", "The blog stylesheet is in static/blog.css."),
        ],
    )
    now = world.session(repo)
    (hit,) = world.search(now, "how did we fix the QueuePool TimeoutError")["results"]
    assert hit["session_id"] == old
    assert "QueuePool" in hit["snippet"]  # the snippet is the error ...
    assert hit["reply"] == FIX  # ... and the fix comes with it
    assert "question" not in hit


def test_a_matched_reply_carries_the_question_it_answered(world):
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    old = world.session(
        repo,
        [
            ("user", "where do the payment keys live?"),
            ("assistant", "In config/secrets.enc.yaml, decrypted by sops at deploy time (stripe section)."),
        ],
    )
    now = world.session(repo)
    (hit,) = world.search(now, "sops")["results"]
    assert hit["session_id"] == old and "sops" in hit["snippet"]
    assert hit["question"] == "where do the payment keys live?"
    assert "reply" not in hit


def test_hermes_shaped_turn_shows_the_assistants_words_not_tool_rows_or_own_calls(world):
    """As Hermes stores a coding turn: an assistant row with only ``tool_calls``, ``tool`` rows,
    this plugin's own call and answer, then the assistant's words. The window is the words."""
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    old = world.session(repo, [("user", "the migration fails with DuplicateColumn email_verified")])
    world.db.append_message(
        old, "assistant", "", tool_calls=_call("terminal", {"command": "alembic history"})
    )
    world.db.append_message(
        old, "tool", "TOOL OUTPUT: revision 3f2a adds email_verified", tool_name="terminal"
    )
    world.db.append_message(
        old, "assistant", None, tool_calls=_call("project_history_search", {"query": "email_verified"})
    )
    world.db.append_message(
        old,
        "tool",
        '{"success": true, "results": [{"snippet": "OWN RESULT"}]}',
        tool_name="project_history_search",
    )
    words = (
        "Two revisions both added email_verified; I dropped the duplicate from 3f2a and upgrade head passes."
    )
    world.db.append_message(old, "assistant", words)
    other = world.session(
        world.folder("beta"), [("user", "DuplicateColumn email_verified"), ("assistant", "OTHER PROJECT")]
    )
    now = world.session(repo)
    result = world.search(now, "DuplicateColumn email_verified", limit=10)
    assert session_ids(result) == [old]
    (hit,) = result["results"]
    assert hit["reply"] == words
    # The terminal's output matched too: it is shown as what the agent saw (issue 30.1), the
    # plugin's own answer never is.
    assert hit["tool_activity"] == "TOOL OUTPUT: revision 3f2a adds email_verified"
    shown = json.dumps(result)
    for absent in ("OWN RESULT", "alembic history", "OTHER PROJECT", other):
        assert absent not in shown


def test_no_reply_when_the_next_message_is_the_users_again(world):
    """The reply belongs to the matched message's own turn, in its own session: a user message
    followed by another user message has none, and the next session's words are not borrowed."""
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    old = world.session(repo, [("user", "note: the flamingo cache is flaky"), ("user", "never mind")])
    world.session(repo, [("assistant", "NEXT SESSION")])
    now = world.session(repo)
    (hit,) = [r for r in world.search(now, "flamingo")["results"] if r["session_id"] == old]
    assert "reply" not in hit and "question" not in hit


def test_window_is_cleaned_redacted_and_bounded(world, plugin):
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    reply = f"Set OPENAI_API_KEY={OPENAI_OLD} in .env\x1b[31m and restart. " + "padding words " * 60
    world.session(repo, [("user", "the embeddings job fails with 401 unauthorized"), ("assistant", reply)])
    now = world.session(repo)
    (hit,) = world.search(now, "embeddings 401")["results"]
    window = hit["reply"]
    assert OPENAI_OLD not in window and OPENAI_OLD[:12] not in json.dumps(hit)
    assert "\x1b" not in window and "restart" in window
    assert window == plugin.text.make_snippet(reply, ("embeddings", "401"), plugin.text.ANSWER_CHARS)
    assert len(window) <= plugin.text.ANSWER_CHARS + 2
