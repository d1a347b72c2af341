"""A real Hermes home holding LoCoMo, the plugin installed and enabled as a user would do it.

Built with Hermes's own ``SessionDB`` and ``projects_db`` through ``tests/harness.py``: five
projects (one folder each), every LoCoMo session a ``cli`` session whose cwd is its project's
folder, turns as user/assistant messages stamped with the session's date, and one fresh, empty
session per project from which the questions are asked.

Import this module before anything imports Hermes: ``harness`` pins ``HERMES_HOME`` at import,
and :func:`activate` repoints it to the bench home before ``model_tools`` loads the plugin.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PLUGIN_DIR = REPO / "project-history-recall"
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

import harness  # noqa: E402  (sets HERMES_HOME for a throwaway boot home; activate() repoints it)
import layout  # noqa: E402
import locomo  # noqa: E402

# PHR_BENCH_CACHE: a private cache when several worktrees share .cache (each run reinstalls its
# own plugin copy and config into the home, so two worktrees must not share one home at a time).
CACHE = Path(os.environ.get("PHR_BENCH_CACHE") or REPO / ".cache" / "bench")
PLUGIN_KEY = harness.PLUGIN_KEY
WORLD_VERSION = 1  # bump when the way the home is built changes


@dataclass
class Built:
    home: Path
    sessions: dict[str, tuple[str, int]]  # Hermes session id -> (conversation, LoCoMo session number)
    fresh: dict[str, str]  # conversation -> the fresh session the questions come from
    projects: dict[str, str]  # conversation -> project id
    build_seconds: float

    def session_of(self, conversation: str, number: int) -> str:
        for sid, (conv, n) in self.sessions.items():
            if conv == conversation and n == number:
                return sid
        raise KeyError((conversation, number))


def _build(home: Path, conversations: list[locomo.Conversation]) -> dict[str, Any]:
    world = harness.World(home, home.parent / "work")
    sessions: dict[str, list] = {}
    fresh: dict[str, str] = {}
    projects: dict[str, str] = {}
    try:
        for conv in conversations:
            folder = world.folder(conv.sample_id)
            projects[conv.sample_id] = world.project(f"LoCoMo {conv.sample_id}", folder)
            for session in conv.sessions:
                sid = harness.new_session_id()
                world.db.create_session(sid, "cli", cwd=folder)
                world.db.set_session_title(sid, f"{conv.sample_id} session {session.number}")
                for turn in session.turns:
                    world.db.append_message(sid, turn.role, turn.text, timestamp=turn.timestamp)
                sessions[sid] = [conv.sample_id, session.number]
            sid = harness.new_session_id()
            world.db.create_session(sid, "cli", cwd=folder)
            fresh[conv.sample_id] = sid
    finally:
        world.close()
    return {"version": WORLD_VERSION, "sessions": sessions, "fresh": fresh, "projects": projects}


def build_home(
    key: str, conversations: list[locomo.Conversation] | None = None, rebuild: bool = False
) -> Built:
    """The home cached under ``.cache/bench/<key>/home``: built once, reused while it is intact."""
    root = CACHE / key
    home = root / "home"
    manifest = root / "world.json"
    started = time.perf_counter()
    data = None
    if manifest.exists() and not rebuild:
        data = json.loads(manifest.read_text())
        if data.get("version") != WORLD_VERSION or not (home / "state.db").exists():
            data = None
    if data is None:
        if root.exists():
            shutil.rmtree(root)
        home.mkdir(parents=True)
        activate_env(home)
        data = _build(home, conversations or locomo.load())
        harness.enable_plugin(home)  # copies the plugin and runs `hermes plugins enable`
        manifest.write_text(json.dumps(data, indent=1))
    return Built(
        home=home,
        sessions={sid: (conv, n) for sid, (conv, n) in data["sessions"].items()},
        fresh=data["fresh"],
        projects=data["projects"],
        build_seconds=time.perf_counter() - started,
    )


def activate_env(home: Path) -> None:
    os.environ["HERMES_HOME"] = str(home)
    os.environ.pop("PROJECT_HISTORY_EMBEDDING_API_KEY", None)


def install(home: Path, source: Path | None = None) -> Path:
    """The plugin copy in ``home``, refreshed: this checkout (``source``: another revision's folder).

    A cached home keeps the copy an earlier run installed, and copying over it leaves behind the
    modules that have since moved (``semantic.py`` beside the ``semantic/`` package): they go, so
    the copy is exactly the code under test. Data files (``embeddings.db``, matrix files, consent)
    stay.
    """
    target = home / "plugins" / PLUGIN_KEY
    if source is None:
        harness.install_plugin(home)
        source = PLUGIN_DIR
    elif (source / "project-history-recall" / "plugin.yaml").is_file():
        return install(home, source / "project-history-recall")  # a checkout of the repository
    elif not (source / "plugin.yaml").is_file():  # what follows copies ``source`` and prunes by it
        raise SystemExit(f"not a plugin folder (no plugin.yaml): {source}")
    else:
        shutil.copytree(
            source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("tests", "bench", "__pycache__")
        )
    emptied = set()
    for path in sorted(target.rglob("*.py")):
        relative = path.relative_to(target)
        if "__pycache__" not in relative.parts and not (source / relative).exists():
            path.unlink()
            emptied.add(path.parent)
    for folder in sorted(emptied, key=lambda p: len(p.parts), reverse=True):
        left = [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        if folder != target and not left and not (source / folder.relative_to(target)).exists():
            shutil.rmtree(folder)
    return target


def activate(home: Path, source: Path | None = None) -> Any:
    """Point Hermes at ``home``, refresh the installed plugin copy (this checkout, or ``source``),
    load it through Hermes; the plugin package, its modules imported (``layout.import_parts``)."""
    activate_env(home)
    install(home, source)  # the code under test, even when the home comes from the cache
    import model_tools  # noqa: F401  (runs plugin discovery)
    from hermes_cli.plugins import get_plugin_manager

    loaded = {p["name"]: p for p in get_plugin_manager().list_plugins()}
    if PLUGIN_KEY not in loaded or loaded[PLUGIN_KEY].get("error"):
        raise SystemExit(f"plugin not loaded: {loaded.get(PLUGIN_KEY)}")
    return layout.import_parts(sys.modules[harness.PLUGIN_MODULE])


def module(name: str) -> Any:
    """A module of the loaded plugin by its dotted name (``store``, ``search``, ``semantic.matrix``...)."""
    import importlib

    return importlib.import_module(f"{harness.PLUGIN_MODULE}.{name}")


def configure(plugin: Any, embedding: dict[str, Any] | None) -> Any:
    """What a user does after saying yes: settings in config.yaml and the plugin's consent.json.

    ``embedding=None`` leaves semantic search off (keyword-only runs). Returns the parsed Settings.
    """
    from hermes_cli.config import load_config, save_config

    config = load_config()
    plugins = config.setdefault("plugins", {})
    plugins[PLUGIN_KEY] = {"embedding": {"enabled": embedding is not None, **(embedding or {})}}
    save_config(config)
    env = layout.env(plugin)
    settings = env.settings
    if settings.problems:
        raise SystemExit("config rejected: " + "; ".join(settings.problems))
    if embedding is None:
        env.consent_path.unlink(missing_ok=True)
        return settings
    consent = layout.consent(plugin)
    record = consent.consent_record(
        settings.embedding, env.profile, ["*"], datetime.now(UTC).isoformat(timespec="seconds")
    )
    consent.write_consent(env, record)
    return settings
