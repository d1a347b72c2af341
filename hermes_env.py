"""Hermes's environment as this plugin sees it: home, profile, config, the API key, folders.

Everything is resolved at call time from ``get_hermes_home()``, so a profile switch or a test's
``HERMES_HOME`` is honoured without a restart. A search takes one :class:`HermesEnv` snapshot
and passes it down; nothing here opens a database.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PLUGIN_DIR_NAME = "project-history-recall"


def hermes_home() -> Path:
    from hermes_constants import get_hermes_home

    return Path(get_hermes_home())


def install_command(*packages: str) -> str:
    """The exact command that installs ``packages`` for the Python running Hermes (not any other)."""
    return f"{shlex.quote(sys.executable)} -m pip install {' '.join(packages)}"


def _active_profile_name() -> str:
    try:
        from hermes_cli.profiles import get_active_profile_name

        return get_active_profile_name()
    except Exception:
        return "default"


def _load_config() -> dict[str, Any]:
    """Hermes's config.yaml as Hermes reads it (mtime-cached by Hermes, so cheap per call).

    The plugin only reads it, so Hermes's read-only accessor is used where it exists: it skips
    the defensive deep copy, which is most of a keyword search's own time otherwise.
    """
    try:
        from hermes_cli import config as hermes_config

        load = getattr(hermes_config, "load_config_readonly", None) or hermes_config.load_config
        return load() or {}
    except Exception:
        logger.warning("could not load config.yaml; using defaults", exc_info=True)
        return {}


@dataclass
class HermesEnv:
    """One snapshot of where Hermes keeps things and how the plugin is configured."""

    home: Path
    profile: str
    config: dict[str, Any] = field(repr=False)  # Hermes's cached dict: never modify it

    @classmethod
    def current(cls) -> HermesEnv:
        return cls(home=hermes_home(), profile=_active_profile_name(), config=_load_config())

    # -- files
    @property
    def state_db(self) -> Path:
        return self.home / "state.db"

    @property
    def projects_db(self) -> Path:
        return self.home / "projects.db"

    @property
    def data_dir(self) -> Path:
        """``$HERMES_HOME/plugins/project-history-recall``: where the spec keeps our own files."""
        return self.home / "plugins" / PLUGIN_DIR_NAME

    @property
    def index_path(self) -> Path:
        return self.data_dir / "embeddings.db"

    @property
    def consent_path(self) -> Path:
        return self.data_dir / "consent.json"

    # -- config
    @cached_property
    def settings(self):
        """The plugin's settings; every rejected value is logged once per snapshot."""
        from .config_schema import PLUGIN_KEY, parse_settings

        plugins = self.config.get("plugins") or {}
        if not isinstance(plugins, dict):
            plugins = {}
        entries = plugins.get("entries") or {}
        entry = entries.get(PLUGIN_KEY) if isinstance(entries, dict) else None
        settings = parse_settings(
            plugins.get(PLUGIN_KEY), entry.get("settings") if isinstance(entry, dict) else None
        )
        for problem in settings.problems:
            logger.warning("project-history-recall config: %s", problem)
        return settings

    def api_key(self) -> str | None:
        """``PROJECT_HISTORY_EMBEDDING_API_KEY`` from the environment, else ``$HERMES_HOME/.env``.

        ``hermes`` loads .env at start-up, but a process that only imports ``model_tools`` does
        not. The key goes to the provider and nowhere else: never logged, stored or echoed.
        """
        from .config_schema import API_KEY_ENV

        key = os.environ.get(API_KEY_ENV, "").strip()
        if key:
            return key
        env_file = self.home / ".env"
        if not env_file.exists():
            return None
        try:
            from dotenv import dotenv_values

            return (dotenv_values(env_file).get(API_KEY_ENV) or "").strip() or None
        except Exception:
            logger.warning("could not read %s", env_file, exc_info=True)
            return None

    # -- folders
    def junk_folders(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Git roots that are never an automatic repo project, as on the desktop
        (``_is_repo_junk``): the home folder itself, and ``HERMES_HOME`` with everything under it
        (a repository in ``$HERMES_HOME/plugins/`` is a plugin, not a project). As (exact roots,
        trees); :mod:`scope` adds their real paths."""
        return (str(Path.home()),), (str(self.home),)

    def home_folder(self) -> str:
        """Where "move to Home" puts a conversation: ``terminal.cwd`` if it names a folder, else ~."""
        terminal = self.config.get("terminal") or {}
        configured = str((terminal.get("cwd") if isinstance(terminal, dict) else "") or "").strip()
        if configured and configured not in (".", "auto", "cwd"):
            candidate = Path(configured).expanduser()
            if candidate.is_dir():
                return str(candidate.resolve())
        return str(Path.home())
