"""Issue 30.1: what the agent did and saw (an assistant row's ``tool_calls``, ``tool`` rows) is
evidence for its conversation, credited to the user message that opened the turn; it is never a
result itself, the plugin's own calls and results are never evidence, and other projects' tool rows
stay out. Through the real dispatcher and real SessionDB sessions, stored as Hermes stores a turn."""

from __future__ import annotations

import json

from credentials import OPENAI_OLD
from harness import session_ids, use_policy

CONFIG = "QX_FLUSH_QUOTA=2\nQX_SPOOL_DEPTH=1000\nLOG_LEVEL=info\n"
REPLY = "Done: the client now reads config/client.env on start."


def _call(name: str, arguments: dict, call_id: str = "call_1") -> list[dict]:
    return [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    ]


def _turn(world, session: str, ask: str, tool: str, arguments: dict, output: str, words: str) -> None:
    """One Hermes turn: the user's words, a call, its output, the assistant's words."""
    world.db.append_message(session, "user", ask)
    world.db.append_message(session, "assistant", None, tool_calls=_call(tool, arguments))
    world.db.append_message(session, "tool", output, tool_name=tool, tool_call_id="call_1")
    world.db.append_message(session, "assistant", words)


def _config_turn(world, session: str) -> None:
    """The turn every test here asks about: the agent read a config whose keys the words never name."""
    _turn(
        world,
        session,
        "make the client cope with 503s",
        "read_file",
        {"path": "config/client.env"},
        CONFIG,
        REPLY,
    )


def test_a_key_seen_only_in_tool_output_finds_its_turn(world):
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    old = world.session(repo)
    _config_turn(world, old)
    world.session(repo, [("user", "the blog styles please"), ("assistant", "In static/blog.css.")])
    now = world.session(repo)
    result = world.search(now, "what did we set QX_FLUSH_QUOTA to?")
    assert session_ids(result) == [old]
    (hit,) = result["results"]
    assert hit["snippet"] == "make the client cope with 503s"  # the turn's opening message
    assert hit["reply"] == REPLY  # the turn's answer comes with it
    assert "QX_FLUSH_QUOTA=2" in hit["tool_activity"]  # and what the agent saw, which answers


def test_a_command_the_agent_ran_is_evidence(world):
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    old = world.session(repo)
    _turn(
        world,
        old,
        "clean the build folder",
        "terminal",
        {"command": "rm -rf dist && npm run build:zephyrine"},
        "(no output)",
        "Rebuilt.",
    )
    now = world.session(repo)
    result = world.search(now, "when did we run build:zephyrine")
    assert session_ids(result) == [old]
    assert "npm run build:zephyrine" in result["results"][0]["tool_activity"]


def test_tool_activity_is_cleaned_and_redacted(world):
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    output = f"QX_FLUSH_QUOTA=2\nOPENAI_API_KEY={OPENAI_OLD}\n\x1b[31mdone\x1b[0m"
    _turn(world, world.session(repo), "check the env file", "read_file", {"path": ".env"}, output, "Checked.")
    now = world.session(repo)
    (hit,) = world.search(now, "QX_FLUSH_QUOTA")["results"]
    shown = hit["tool_activity"]
    assert "QX_FLUSH_QUOTA=2" in shown and "done" in shown
    assert OPENAI_OLD not in json.dumps(hit) and OPENAI_OLD[:12] not in json.dumps(hit)
    assert "\x1b" not in shown


def test_switched_off_tool_activity_is_no_evidence(world, plugin):
    """The policy's switch: with ``activity_weight`` 0 a key seen only in tool output finds
    nothing, so the test above fails if the rule goes."""
    use_policy(plugin, activity_weight=0.0)
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    old = world.session(repo)
    _config_turn(world, old)
    now = world.session(repo)
    assert world.search(now, "what did we set QX_FLUSH_QUOTA to?")["results"] == []


def test_own_calls_and_results_are_never_evidence(world):
    """A recall chat: the agent's project_history_search call names the key and the plugin's own
    answer quotes the config; neither makes the chat a match (spec 19.4). Nor does a result row
    without its tool name that answers such a call."""
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    chat = world.session(repo)
    world.db.append_message(chat, "user", "remind me of the client settings")
    world.db.append_message(
        chat, "assistant", None, tool_calls=_call("project_history_search", {"query": "QX_FLUSH_QUOTA"})
    )
    answer = json.dumps({"success": True, "results": [{"snippet": CONFIG}]})
    world.db.append_message(chat, "tool", answer, tool_name="project_history_search", tool_call_id="call_1")
    world.db.append_message(
        chat,
        "assistant",
        None,
        tool_calls=_call("project_history_search", {"query": "QX_SPOOL_DEPTH"}, "call_own_2"),
    )
    world.db.append_message(chat, "tool", answer, tool_call_id="call_own_2")
    world.db.append_message(chat, "assistant", "It was in an earlier session.")
    now = world.session(repo)
    assert world.search(now, "QX_FLUSH_QUOTA")["results"] == []
    assert world.search(now, "QX_SPOOL_DEPTH")["results"] == []


def test_other_projects_tool_output_stays_out(world):
    alpha, beta = world.folder("alpha"), world.folder("beta")
    world.project("Alpha", alpha)
    world.project("Beta", beta)
    theirs = world.session(beta)
    _turn(world, theirs, "make the client cope", "read_file", {"path": "config/client.env"}, CONFIG, REPLY)
    now = world.session(alpha)
    for mode in ("keyword", "hybrid"):
        result = world.search(now, "QX_FLUSH_QUOTA", mode=mode)
        assert theirs not in session_ids(result)
        assert "qx_" not in json.dumps(result.get("results", [])).casefold()


def test_text_matches_rank_above_tool_output_alone(world):
    """A conversation that says the key in words comes before one that only saw it in a tool row
    (the activity weighs less than a word match in the message itself)."""
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    seen = world.session(repo)
    _config_turn(world, seen)
    said = world.session(
        repo, [("user", "set QX_FLUSH_QUOTA to 4 please"), ("assistant", "QX_FLUSH_QUOTA is now 4 in .env")]
    )
    now = world.session(repo)
    assert session_ids(world.search(now, "QX_FLUSH_QUOTA", limit=5)) == [said, seen]


def test_only_the_best_tool_rows_of_a_query_are_looked_up(world, plugin):
    """``activity_rows`` bounds the tool rows looked up for their turn per FTS query, best bm25
    first (a large project's common words match thousands): with 1, only the conversation whose
    tool row matches best is found through its activity."""
    repo = world.folder("alpha")
    world.project("Alpha", repo)
    strong, weak = world.session(repo), world.session(repo)
    _turn(
        world,
        strong,
        "check the worker",
        "read_file",
        {"path": "a.env"},
        "QX_FLUSH_QUOTA=2 QX_FLUSH_QUOTA",
        "ok",
    )
    _turn(
        world,
        weak,
        "check the client",
        "read_file",
        {"path": "b.env"},
        "QX_FLUSH_QUOTA=3 " + "pad " * 200,
        "ok",
    )
    now = world.session(repo)
    assert set(session_ids(world.search(now, "QX_FLUSH_QUOTA", limit=5))) == {strong, weak}
    use_policy(plugin, activity_rows=1)
    assert session_ids(world.search(now, "QX_FLUSH_QUOTA", limit=5)) == [strong]
