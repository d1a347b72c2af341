"""End to end through the real ``hermes`` CLI: a user's home, a fake model, a real turn.

One Hermes home serves the module. The plugin is copied into it and enabled with ``hermes
plugins enable``; the model is configured with ``hermes config set`` to point at
:class:`fake_chat_server.FakeChatServer` on 127.0.0.1. Projects and an earlier session are
written in-process with Hermes's own ``projects_db`` and ``SessionDB``. Then
``hermes chat -q ... -Q`` runs as a subprocess in the project folder; the fake model calls our
tool and the test reads what Hermes sent back and what it recorded in ``state.db``.

Offline by construction: the subprocesses get ``HTTP(S)_PROXY`` pointing at the fake server,
which refuses and records every proxied request (``server.outbound``), and the start-up
downloads Hermes would try are switched off (tirith and lazy package installs in config, the
PyPI update check by a fresh ``.update_check`` cache). Provider keys from the caller's
environment are removed so that the home's config is the only thing that decides the model.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_chat_server import FakeChatServer
from harness import PLUGIN_KEY, VENV_BIN, World, enable_plugin, run_hermes

SEARCH_TOOL = "project_history_search"
MOVE_TOOL = "project_session_move"
TOOLSET = "project_history"
DISTINCT = "quokkaflux"  # a word no other message contains
EARLIER = f"We decided to run the {DISTINCT} migration in two batches, after the freeze."
CHAT_TIMEOUT = 90.0
COMMAND_TIMEOUT = 60.0

# Caller variables that would pick another model, endpoint, session or proxy for Hermes.
_FOREIGN_ENV = re.compile(
    r"^(?:.*_API_KEY|.*_TOKEN|.*_BASE_URL|OPENAI_.*|ANTHROPIC_.*|OPENROUTER_.*|HERMES_(?!HOME$).*"
    r"|TERMINAL_.*|TIRITH_.*|(?:HTTP|HTTPS|ALL|NO)_PROXY)$",
    re.IGNORECASE,
)


@dataclass
class Home:
    """The module's Hermes home and everything the tests put in it."""

    home: Path
    user_home: Path
    server: FakeChatServer = field(repr=False)
    alpha: str  # project folder (a git repo) of project Alpha
    beta: str  # project folder (a git repo) of project Beta
    alpha_id: str
    beta_id: str
    earlier: str  # the earlier session in alpha
    beta_earlier: str = ""  # an earlier session in beta
    env: dict[str, str] = field(default_factory=dict)
    timings: list[str] = field(default_factory=list)

    def hermes(self, *args: str, cwd: str | Path | None = None, timeout: float = COMMAND_TIMEOUT):
        started = time.monotonic()
        try:
            done = run_hermes(self.home, *args, cwd=Path(cwd) if cwd else None, timeout=timeout, **self.env)
        except subprocess.TimeoutExpired as expired:
            pytest.fail(
                f"`hermes {' '.join(args)}` timed out after {timeout:.0f}s\n"
                f"--- stdout\n{_text(expired.stdout)}\n--- stderr\n{_text(expired.stderr)}\n"
                f"--- fake server\n{self.server.dump()}"
            )
        self.timings.append(f"{' '.join(args[:2])} {time.monotonic() - started:.1f}s")
        return done

    def chat(self, prompt: str, cwd: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], str]:
        """One real non-interactive turn; returns the process and the session's id."""
        done = self.hermes(
            "chat", "-q", prompt, "-Q", "--max-turns", "4", *extra, cwd=cwd, timeout=CHAT_TIMEOUT
        )
        assert done.returncode == 0, self.diagnose(done)
        found = re.search(r"session_id:\s*(\S+)", done.stderr + done.stdout)
        assert found, "no session_id printed\n" + self.diagnose(done)
        return done, found.group(1)

    def diagnose(self, done: subprocess.CompletedProcess[str] | None = None) -> str:
        parts = []
        if done is not None:
            parts += [
                f"--- hermes {' '.join(map(str, done.args[1:]))} -> exit {done.returncode}",
                f"--- stdout\n{done.stdout}",
                f"--- stderr\n{done.stderr}",
            ]
        parts.append(f"--- fake server\n{self.server.dump()}")
        log = self.home / "logs" / "errors.log"
        if log.exists():
            parts.append(f"--- {log}\n{log.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)

    # -- state.db, read-only (Hermes may still hold it in WAL mode)
    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        uri = (self.home / "state.db").resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=10)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in conn.execute(sql, params)]
        finally:
            conn.close()

    def session_row(self, session_id: str) -> dict[str, Any]:
        rows = self.query("SELECT * FROM sessions WHERE id = ?", session_id)
        assert rows, f"session {session_id} not in state.db\n" + self.diagnose()
        return rows[0]

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        return self.query(
            "SELECT role, content, tool_name, tool_call_id FROM messages WHERE session_id = ? ORDER BY id",
            session_id,
        )


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""


def _seed_update_check_cache(home: Path) -> None:
    """Hermes checks PyPI for updates in a background thread at start-up unless it checked
    within 6 hours (``hermes_cli.banner.check_for_updates``); a fresh cache entry says it did."""
    import hermes_cli

    record = {
        "ts": time.time(),
        "behind": 0,
        "rev": os.environ.get("HERMES_REVISION"),
        "ver": hermes_cli.__version__,
    }
    (home / ".update_check").write_text(json.dumps(record))


@pytest.fixture(scope="module")
def hermes_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    root = tmp_path_factory.mktemp("cli-e2e").resolve()  # resolved: Hermes records os.getcwd()
    home, user_home = root / "hermes-home", root / "user-home"
    home.mkdir()
    user_home.mkdir()
    with pytest.MonkeyPatch.context() as patch, FakeChatServer() as server:
        for name in [n for n in os.environ if _FOREIGN_ENV.match(n)]:
            patch.delenv(name)
        patch.setenv("HERMES_HOME", str(home))
        env = {
            "HOME": str(user_home),  # nothing from the real ~ (credentials of other tools, ~/.hermes)
            "HTTP_PROXY": server.proxy_url,
            "HTTPS_PROXY": server.proxy_url,
            "ALL_PROXY": server.proxy_url,
            "http_proxy": server.proxy_url,
            "https_proxy": server.proxy_url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

        # Installed and configured the way a user does it.
        enable_plugin(home)
        h = Home(home, user_home, server, "", "", "", "", "", env=env)
        for key, value in (
            ("model.provider", "custom"),
            ("model.base_url", server.base_url),
            ("model.default", "fake-model"),
            ("model.context_length", "131072"),  # no context-length probing
            ("security.tirith_enabled", "false"),  # else Hermes downloads tirith from GitHub
            ("security.allow_lazy_installs", "false"),  # else it pip-installs edge-tts at start-up
        ):
            done = h.hermes("config", "set", key, value)
            assert done.returncode == 0, h.diagnose(done)
        _seed_update_check_cache(home)

        # Projects and an earlier conversation, through Hermes's own API (explicit paths:
        # hermes_state.DEFAULT_DB_PATH was frozen when the harness first imported it).
        world = World(home, root / "work")
        try:
            h.alpha = world.folder("alpha", git=True)
            h.beta = world.folder("beta", git=True)
            h.alpha_id = world.project("Alpha", h.alpha)
            h.beta_id = world.project("Beta", h.beta)
            h.earlier = world.session(
                h.alpha,
                [("user", f"How should we run the {DISTINCT} migration?"), ("assistant", EARLIER)],
                title="Migration planning",
            )
            h.beta_earlier = world.session(
                h.beta, [("user", f"Beta also mentions {DISTINCT}, but it is another project.")]
            )
        finally:
            world.close()
        yield h
        print(f"\n[cli-e2e] hermes subprocesses: {', '.join(h.timings)}")


# --------------------------------------------------------------------------- static CLI views


def test_tools_list_shows_project_history_enabled(hermes_home: Home) -> None:
    done = hermes_home.hermes("tools", "list")
    assert done.returncode == 0, hermes_home.diagnose(done)
    lines = [line.strip() for line in done.stdout.splitlines()]
    plugin_section = (
        lines[lines.index("Plugin toolsets (cli):") + 1 :] if "Plugin toolsets (cli):" in lines else []
    )
    ours = [line for line in plugin_section if re.search(rf"\b{TOOLSET}\b", line)]
    assert ours, hermes_home.diagnose(done)
    assert "enabled" in ours[0] and "disabled" not in ours[0], ours[0]


def test_plugins_list_shows_plugin_enabled(hermes_home: Home) -> None:
    done = hermes_home.hermes("plugins", "list", "--json", "--no-bundled")
    assert done.returncode == 0, hermes_home.diagnose(done)
    plugins = {p["name"]: p for p in json.loads(done.stdout)}
    assert plugins.get(PLUGIN_KEY, {}).get("status") == "enabled", done.stdout

    plain = hermes_home.hermes("plugins", "list", "--plain", "--no-bundled")
    assert plain.returncode == 0, hermes_home.diagnose(plain)
    assert re.search(rf"^enabled\s+user\s+\S+\s+{re.escape(PLUGIN_KEY)}\s*$", plain.stdout, re.M), (
        plain.stdout
    )


def test_plugin_loads_without_error_in_fresh_process(hermes_home: Home) -> None:
    """``hermes plugins list`` never shows load errors; the plugin manager does."""
    probe = (
        "import json, model_tools\n"
        "from hermes_cli.plugins import get_plugin_manager\n"
        "from tools.registry import registry\n"
        f"entry = [p for p in get_plugin_manager().list_plugins() if p['name'] == {PLUGIN_KEY!r}]\n"
        f"tools = sorted(registry.get_tool_names_for_toolset({TOOLSET!r}))\n"
        "print('RESULT ' + json.dumps({'entry': entry, 'tools': tools}, default=str))\n"
    )
    environment = {
        **os.environ,
        **hermes_home.env,
        "HERMES_HOME": str(hermes_home.home),
        "HERMES_PLUGINS_DEBUG": "1",
    }
    done = subprocess.run(
        [str(VENV_BIN / "python"), "-c", probe],
        cwd=str(hermes_home.user_home),  # not the repository: no stray `cli`/plugin modules on sys.path
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert len(result["entry"]) == 1, done.stdout + done.stderr[-4000:]
    entry = result["entry"][0]
    print(f"\n[cli-e2e] plugin entry: {entry}")
    assert entry.get("enabled") is True, entry
    assert not entry.get("error"), f"plugin load error: {entry.get('error')}\n{done.stderr[-4000:]}"
    assert result["tools"] == sorted([SEARCH_TOOL, MOVE_TOOL]), result
    assert f"Plugin {PLUGIN_KEY} registered tool: {SEARCH_TOOL}" in done.stderr, done.stderr[-4000:]


# --------------------------------------------------------------------------- real turns


def test_chat_turn_searches_project_history(hermes_home: Home) -> None:
    h = hermes_home
    answer = "You decided to run it in two batches."
    h.server.script(SEARCH_TOOL, {"query": DISTINCT, "mode": "keyword", "limit": 3}, answer=answer)

    done, session_id = h.chat(f"What did we decide about the {DISTINCT} migration?", cwd=h.alpha)
    diagnostics = h.diagnose(done)
    print(f"\n[cli-e2e] search turn: session {session_id}; stdout {done.stdout.strip()!r}")

    # The model saw our tools, on a first request shaped [system, user], and called one.
    first = h.server.body_answered_with("tool_call")
    assert first is not None, diagnostics
    assert [m.get("role") for m in first["messages"]] == ["system", "user"], diagnostics
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {SEARCH_TOOL, MOVE_TOOL} <= offered, diagnostics
    assert h.server.problems == [], diagnostics
    assert h.server.tool_calls_sent == 1, diagnostics
    assert answer in done.stdout, diagnostics

    # What the handler returned, as Hermes sent it back to the model.
    assert len(h.server.tool_results) == 1, diagnostics
    result = json.loads(h.server.tool_results[0])
    assert result["success"] is True, result
    assert result["project"]["id"] == h.alpha_id, result
    hits = {r["session_id"]: r for r in result["results"]}
    assert h.earlier in hits, result
    assert session_id not in hits, result  # never the calling conversation itself
    assert DISTINCT in hits[h.earlier]["snippet"], result
    assert all(r.get("session_id") != session_id for r in result["results"]), result

    # What Hermes recorded: the new session is in the project folder, with our tool's row.
    row = h.session_row(session_id)
    assert row["cwd"] == h.alpha, row
    assert row["source"] == "cli", row
    tool_rows = [m for m in h.messages(session_id) if m["role"] == "tool"]
    assert [m["tool_name"] for m in tool_rows] == [SEARCH_TOOL], h.messages(session_id)
    assert json.loads(tool_rows[0]["content"])["success"] is True
    assert h.server.outbound == [], diagnostics


def test_chat_turn_moves_session_to_other_project(hermes_home: Home) -> None:
    h = hermes_home
    h.server.script(MOVE_TOOL, {"project_id": h.beta_id}, answer="Moved this conversation to Beta.")

    done, session_id = h.chat("This conversation belongs to project Beta, move it there.", cwd=h.alpha)
    diagnostics = h.diagnose(done)
    print(f"\n[cli-e2e] move turn: session {session_id}; stdout {done.stdout.strip()!r}")

    assert h.server.problems == [], diagnostics  # the move tool was offered
    assert h.server.tool_calls_sent == 1, diagnostics
    assert len(h.server.tool_results) == 1, diagnostics
    result = json.loads(h.server.tool_results[0])
    assert result["success"] is True, result
    assert result["cwd"] == h.beta, result
    assert result["project"]["id"] == h.beta_id, result
    assert result["git_repo_root"] == h.beta, result
    # The CLI has no live re-anchoring callback: the process stays where it was until resumed.
    assert result["live_session"] == "unchanged until resumed", result
    assert "until it is resumed" in result["message"], result

    row = h.session_row(session_id)
    assert row["cwd"] == h.beta, f"{row}\n{diagnostics}"
    assert row["git_repo_root"] == h.beta, row
    assert h.server.outbound == [], diagnostics

    # Resumed from the same shell (still in alpha), Hermes goes back to the recorded cwd, so
    # the conversation now lives in Beta and searches Beta's history, not Alpha's.
    h.server.script(SEARCH_TOOL, {"query": DISTINCT, "mode": "keyword", "limit": 3}, answer="Beta history.")
    done, resumed = h.chat(f"Anything about {DISTINCT} here?", h.alpha, "--resume", session_id)
    diagnostics = h.diagnose(done)
    print(f"[cli-e2e] resumed turn: session {resumed}; stdout {done.stdout.strip()!r}")
    assert resumed == session_id, diagnostics
    assert len(h.server.tool_results) == 1, diagnostics
    result = json.loads(h.server.tool_results[0])
    assert result["success"] is True, result
    assert result["project"]["id"] == h.beta_id, result
    found = [r["session_id"] for r in result["results"]]
    assert h.beta_earlier in found, result
    assert h.earlier not in found, result
    assert session_id not in found, result
    assert h.session_row(session_id)["cwd"] == h.beta
    assert h.server.outbound == [], diagnostics


def test_a_conversation_that_ends_is_indexed_by_its_own_process(hermes_home: Home) -> None:
    """``on_session_finalize``: the ending `hermes chat -q` embeds its own messages (MiniLM in
    process, consent for Alpha), so another conversation's first search reads a complete index."""
    from models import minilm_model_dir

    h = hermes_home
    settings = {"provider": "local", "model": "all-MiniLM-L6-v2-int8", "model_path": str(minilm_model_dir())}
    for key, value in settings.items():
        done = h.hermes("config", "set", f"plugins.{PLUGIN_KEY}.embedding.{key}", value, "--force")
        assert done.returncode == 0, h.diagnose(done)
    allowed = h.hermes("project-history", "allow", "--yes", "--project", h.alpha_id, cwd=h.alpha)
    assert allowed.returncode == 0, h.diagnose(allowed)
    try:
        h.server.script(
            SEARCH_TOOL, {"query": DISTINCT, "mode": "keyword", "limit": 3}, answer="Two batches."
        )
        done, session_id = h.chat(f"Remind me of the {DISTINCT} plan", cwd=h.alpha)
        texts = [m for m in h.messages(session_id) if m["role"] in ("user", "assistant") and m["content"]]
        db = h.home / "plugins" / PLUGIN_KEY / "embeddings.db"
        with sqlite3.connect(db) as conn:
            indexed = conn.execute(
                "SELECT count(DISTINCT message_id) FROM chunks WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
        assert len(texts) == 2 and indexed == 2, h.diagnose(done)
    finally:
        revoked = h.hermes("project-history", "revoke", "--purge")
        assert revoked.returncode == 0, h.diagnose(revoked)
