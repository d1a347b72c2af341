"""The budget covers the whole call, and a provider's fault is named (issue 18, item 12).

Every ``hermes chat -q`` is a fresh process: its one search imports the provider's client and
numpy before it can ask anything. The budget counts from the call's start, so a process whose
imports alone outlast it sends nothing and answers with its keyword results. The child's imports
are made slow on purpose (a ``sitecustomize`` that sleeps before ``openai`` loads), so the test
decides by what the counting server received, not by a clock.

How long each fault costs against ``index_budget_seconds`` + 1 s is measured, not asserted:
``bench/budget.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import json

import faults
import pytest
from harness import session_ids
from test_guarantees import agree, app, cli, configure, server  # noqa: F401  (fixtures)

IMPORT_SECONDS = 3.0
QUERY = "login session expires"


@pytest.fixture
def indexed(app, server):  # noqa: F811
    """The app's project indexed by the terminal command, then a search budget of one second."""
    agree(app)
    done = cli(app, "index", cwd=app.repo)
    assert done.returncode == 0, done.stderr
    configure(app, index_budget_seconds=1, timeout_seconds=20, max_retries=2)
    server.reset()
    return app


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_imports_that_outlast_the_budget_send_nothing(indexed, server, tmp_path, mode):  # noqa: F811
    slow = faults.slowing_imports(tmp_path / "slow", {"openai": IMPORT_SECONDS})
    (call,) = faults.call_tool_in_child(indexed.home, indexed.current, QUERY, [mode], pythonpath=slow)
    result = call.data
    # The child has exited: whatever its semantic side did after the call returned is done too.
    assert server.requests == 0, "a query was sent after the call's budget had run out"
    assert result["success"] and result["semantic_status"] == "unavailable", result
    # Semantic mode waits for its own side, which finds no time left once openai has loaded;
    # hybrid stops waiting for its worker at the budget and answers while the import still runs.
    said = {"semantic": "no time left within the search's budget", "hybrid": "within the search's budget"}
    assert said[mode] in result["semantic_error"], result
    assert indexed.expiry in session_ids(result)  # the keyword results stand


def test_the_same_call_with_quick_imports_asks_the_provider(indexed, server):  # noqa: F811
    # The counterpart of the test above, with a budget a busy machine cannot exhaust: a child's
    # cold start alone (Hermes, the plugin, openai) takes about a second on two loaded cores.
    configure(indexed, index_budget_seconds=10, timeout_seconds=20, max_retries=2)
    (call,) = faults.call_tool_in_child(indexed.home, indexed.current, QUERY, ["hybrid"])
    assert call.data["semantic_status"] == "ready", call.raw
    assert server.requests >= 1


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        ("echo", "refused the API key"),
        ("duplicate_index", "not one per input (index repeated: [0]"),
        ("wider", "the model behind the endpoint changed"),
        ("down", "failed on its side"),
        ("hang", "no answer within"),
    ],
)
def test_a_provider_fault_is_named_in_the_answer(indexed, server, plugin, fault, named):  # noqa: F811
    plugin.reset_process_state()
    # Two messages the index lacks: a batch of two for a fault that shows only in a batch.
    indexed.add(indexed.expiry, [("user", "Idle timeout: thirty minutes"), ("assistant", "Deployed.")])
    server.set_mode(fault)
    result = indexed.search(indexed.current, QUERY, mode="hybrid")
    assert result["success"] and result["semantic_status"] == "unavailable", result
    assert named in result["semantic_error"], result["semantic_error"]
    assert "Traceback" not in json.dumps(result)
