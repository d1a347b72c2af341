"""The fast tier (`make check`): the plugin's pure functions, imported straight from this folder
as a package, without booting Hermes. Nothing here starts a process or reaches the network; the
semantic index's tests (test_semantic_store.py) write a temporary Hermes home with Hermes's own
``SessionDB`` and embed with a deterministic fake (fakes.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "project-history-recall"
PACKAGE = "project_history_recall_under_test"


def load_package():
    """The plugin folder as a package (its relative imports need one), loaded once per process."""
    if PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            PACKAGE, PLUGIN_DIR / "__init__.py", submodule_search_locations=[str(PLUGIN_DIR)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = module
        spec.loader.exec_module(module)
    return sys.modules[PACKAGE]


@pytest.fixture(scope="session")
def phr():
    """The plugin package; its submodules are imported with ``phr.module("fulltext.query")``."""
    package = load_package()

    class Modules:
        def __getattr__(self, name: str):
            try:
                return importlib.import_module(f"{PACKAGE}.{name}")
            except ModuleNotFoundError:
                raise AttributeError(name) from None

        @staticmethod
        def module(dotted: str):
            return importlib.import_module(f"{PACKAGE}.{dotted}")

    modules = Modules()
    modules.package = package
    return modules


# --------------------------------------------------------------------------- the semantic side's stand-ins


@pytest.fixture
def fake_embedder():
    """A factory of deterministic embedders (``fakes.HashEmbedder``): no model, no network."""
    from unit.fakes import HashEmbedder

    return HashEmbedder


@pytest.fixture(scope="session")
def blank_state_db(tmp_path_factory):
    """An empty state.db with the schema Hermes's ``SessionDB`` writes, made once per run."""
    from hermes_state import SessionDB

    path = tmp_path_factory.mktemp("blank-state") / "state.db"
    SessionDB(db_path=path).close()
    assert not path.with_name("state.db-wal").exists()  # closed whole: the file alone is the database
    return path


@pytest.fixture
def hermes_home(tmp_path, monkeypatch):
    """A temporary ``HERMES_HOME`` (not created): where a test's ``fakes.History`` goes."""
    home = tmp_path / "hermes-home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home
