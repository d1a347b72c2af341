"""``since`` / ``until`` (issue 32 part 2) through the real Hermes dispatcher and CLI: no result
outside the window in any mode, a message's own time deciding (a conversation active on both sides
of a bound shows only its in-window messages), and a bad value one JSON error line."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from embedding_server import EmbeddingServer
from harness import enable_plugin, run_hermes, session_ids, use_embedding_server

MODES = ("keyword", "semantic", "hybrid")
FORM = "(use a date like 2026-11-20 or a span like 7d or 2w)"


def at(day: int, month: int = 11) -> float:
    return datetime(2026, month, day, 12, 0).timestamp()  # local noon: "when" is local time


@pytest.fixture(scope="module")
def server():
    with EmbeddingServer() as running:
        yield running


def cli(world, *args: str):
    return run_hermes(world.home, "project-history", *args, cwd=world.alpha)


@pytest.fixture
def billing(world, server):
    """Project Alpha: billing work before 2026-11-20 (``old``), in the window (``recent``), and a
    conversation with a billing message on each side of the window's start (``both``)."""
    enable_plugin(world.home)
    use_embedding_server(server)
    alpha = world.folder("alpha", git=True)
    world.alpha = alpha
    world.project("Alpha", alpha)
    world.old = world.session(
        alpha, [("user", "The billing service retries refunds three times")], timestamp=at(2)
    )
    world.recent = world.session(
        alpha, [("user", "The billing service now rounds invoices to cents")], timestamp=at(24)
    )
    world.both = world.session(
        alpha, [("user", "Billing service ledger migration plan for the billing service")], timestamp=at(5)
    )
    (world.both_late,) = world.add(
        world.both, [("assistant", "The billing service deploy went fine")], timestamp=at(26)
    )
    world.now = world.session(alpha, [("user", "what did we do on billing?")])
    import hermes_plugins.project_history_recall as plugin

    plugin.reset_process_state()
    return world


def search(world, mode: str, **window: str) -> dict:
    args = {"query": "billing service", "mode": mode, "limit": 10, **window}
    result = world.call("project_history_search", args, world.now)
    assert result["success"], result
    return result


def test_no_result_outside_the_window_in_any_mode(billing):
    world = billing
    assert cli(world, "allow", "--all-projects", "--yes").returncode == 0
    done = cli(world, "index", "--all-projects")
    assert done.returncode == 0, done.stderr
    for mode in MODES:
        unbounded = session_ids(search(world, mode))
        assert world.old in unbounded, (mode, unbounded)  # found when no window is asked for

        result = search(world, mode, since="2026-11-20", until="2026-11-30")
        found = session_ids(result)
        assert world.old not in found, (mode, result)
        assert world.recent in found, (mode, result)
        for row in result["results"]:
            assert "2026-11-20" <= row["when"] < "2026-12-01", (mode, row)
            if row["session_id"] == world.both:
                assert row["message_id"] == world.both_late, (mode, row)  # not its November 5 message

        before = search(world, mode, until="2026-11-19")
        assert world.recent not in session_ids(before), (mode, before)
        assert all(row["when"] < "2026-11-20" for row in before["results"]), (mode, before)


def test_a_span_counts_back_from_now(billing):
    world = billing
    fresh = world.session(
        world.alpha, [("user", "billing service alerts tuned")], timestamp=time.time() - 3 * 86400
    )
    result = search(world, "keyword", since="7d")
    assert session_ids(result) == [fresh], result
    older = search(world, "keyword", until="7d")
    assert fresh not in session_ids(older) and world.old in session_ids(older), older
    empty = search(world, "keyword", since="2026-10-01", until="2026-10-31")
    assert empty["results"] == [], empty
    assert empty["message"] == "No matching messages in this project's other sessions in that time window"


@pytest.mark.parametrize(
    ("window", "error"),
    [
        ({"since": "last week"}, f"since: 'last week' is not a date or a span {FORM}"),
        ({"until": "2026-02-30"}, f"until: '2026-02-30' is not a date or a span {FORM}"),
        ({"since": "2026-11-21", "until": "2026-11-20"}, f"since: it is not before until {FORM}"),
    ],
)
def test_a_bad_value_is_one_json_error_line(billing, window, error):
    import model_tools

    args = {"query": "billing service", "mode": "keyword", **window}
    raw = model_tools.handle_function_call(
        "project_history_search", args, task_id="t", session_id=billing.now
    )
    assert "\n" not in raw
    assert json.loads(raw) == {"success": False, "error": error}


def test_cli_search_takes_since_and_until(billing):
    world = billing
    done = cli(world, "search", "billing", "service", "--mode", "keyword", "--since", "2026-11-20", "--json")
    assert done.returncode == 0, done.stderr
    found = session_ids(json.loads(done.stdout))
    assert world.recent in found and world.old not in found, found
    done = cli(world, "search", "billing", "--until", "last tuesday")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"until: 'last tuesday' is not a date or a span {FORM}" in lines[0], lines
