"""The fast tier (`make check`): the plugin's pure functions, imported straight from this folder
as a package, without booting Hermes. Nothing here reads a Hermes home or starts a process."""

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
