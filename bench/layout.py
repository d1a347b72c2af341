"""Where the bench finds the parts of a loaded plugin, whichever revision it is.

Since f3f7cb8 ("Layout of the design card") the plugin is ``store.py``, ``search.py`` and a package
per concern (``fulltext/``, ``projects/``, ``semantic/``...), and everything a process remembers
(embedders, matrices, scope snapshots, the background indexer) belongs to one
``process_state()``. Before it the modules were flat (``hermes_env``, ``hermes_db``, ``scope``,
``embedders``, ``index_db``, ``indexer``...) and the caches module globals. ``scale.py --baseline``
measures an older revision with the same bench code, so each accessor here tries the new place
first, then the old one. Benchmarks that only ever run this checkout use the same accessors, so
the next move of a module is fixed in this one file.

``plugin`` is the package as Hermes loaded it (``hermes_plugins.project_history_recall``); call
:func:`import_parts` once after loading it.
"""

from __future__ import annotations

import importlib
from typing import Any

# The modules the accessors read, imported after the plugin is loaded (an attribute of a package
# exists once its module is imported).
NEW_MODULES = (
    "store",
    "search",
    "fulltext",
    "fulltext.query",
    "fulltext.retrieval",
    "ranking",
    "projects",
    "semantic",
    "semantic.consent",
    "semantic.chunking",
    "semantic.index_store",
    "semantic.indexer",
    "semantic.matrix",
    "semantic.providers",
)
OLD_MODULES = (
    "hermes_env",
    "hermes_db",
    "scope",
    "consent",
    "embedders",
    "index_db",
    "indexer",
    "semantic",
    "search",
)


def is_new(plugin: Any) -> bool:
    """The layout since f3f7cb8 (its package has ``process_state``)."""
    return hasattr(plugin, "process_state")


def import_parts(plugin: Any) -> Any:
    """Import the modules of the plugin's layout that the accessors use; returns ``plugin``."""
    for name in NEW_MODULES if is_new(plugin) else OLD_MODULES:
        full = f"{plugin.__name__}.{name}"
        try:
            importlib.import_module(full)
        except ModuleNotFoundError as error:
            if error.name != full:  # a module that exists failed to import: say so
                raise
    return plugin


def _find(plugin: Any, *paths: str) -> Any:
    """The first dotted attribute path under ``plugin`` that exists."""
    for path in paths:
        value = plugin
        try:
            for part in path.split("."):
                value = getattr(value, part)
        except AttributeError:
            continue
        return value
    raise AttributeError(f"none of {paths} in {plugin.__name__}")


def state(plugin: Any) -> Any | None:
    """The process's ``ProcessState`` (None before f3f7cb8: module globals held it all)."""
    return plugin.process_state() if is_new(plugin) else None


# --------------------------------------------------------------------------- modules


def env(plugin: Any) -> Any:
    """``HermesEnv.current()``: the home, config and settings as the plugin reads them now."""
    return _find(plugin, "store.HermesEnv", "hermes_env.HermesEnv").current()


def consent(plugin: Any) -> Any:
    return _find(plugin, "semantic.consent", "consent")


def index_store(plugin: Any) -> Any:
    """The module of ``IndexStore``, ``indexer_lock``, ``purge`` (was ``index_db``)."""
    return _find(plugin, "semantic.index_store", "index_db")


def indexer(plugin: Any) -> Any:
    """The module of ``pending_chunks``, ``embed_pending``, ``build_index``, ``index_scope``."""
    return _find(plugin, "semantic.indexer", "indexer")


def matrix_math(plugin: Any) -> Any:
    """The module of ``top_messages`` and ``hits_with_lift`` (``semantic`` before f3f7cb8)."""
    return _find(plugin, "semantic.matrix", "semantic")


def framing_class(plugin: Any) -> Any | None:
    """``Framing`` (chunking since f3f7cb8, the indexer before; None in revisions without it)."""
    try:
        return _find(plugin, "semantic.chunking.Framing", "indexer.Framing")
    except AttributeError:
        return None


def framing(plugin: Any, embedding: Any, embedder: Any) -> Any:
    """What ``pending_chunks`` takes: a ``Framing``, or the settings in revisions before it."""
    framing_type = framing_class(plugin)
    return framing_type.of(embedding, embedder) if framing_type else embedding


# --------------------------------------------------------------------------- objects of a call


def open_db(plugin: Any, hermes_env: Any) -> Any:
    """``HermesDB.open`` as ``run_search`` opens it (with the process's schema memory)."""
    if is_new(plugin):
        return plugin.store.HermesDB.open(hermes_env, state(plugin).schemas)
    return plugin.hermes_db.HermesDB.open(hermes_env)


def project_map(plugin: Any, db: Any) -> Any:
    """A ``ProjectMap`` over ``db`` with the process's memory of scopes and git answers."""
    if is_new(plugin):
        return plugin.projects.ProjectMap(db, state(plugin).projects)
    return plugin.scope.ProjectMap(db)


def fulltext_reader(plugin: Any, db: Any) -> Any:
    """What the keyword functions read through: a ``FullTextReader`` since f3f7cb8, else ``db``."""
    if is_new(plugin):
        return plugin.fulltext.FullTextReader(db, state(plugin).scope_ids)
    return db


def embedder(plugin: Any, embedding: Any, api_key: str | None = None) -> Any:
    """The process's cached embedder for these settings: the one ``run_search`` uses."""
    if is_new(plugin):
        return state(plugin).semantic.providers.embedder(embedding, api_key)
    return plugin.embedders.make_embedder(embedding, api_key)


def matrices(plugin: Any) -> Any:
    """The process's ``MatrixCache`` (``semantic.MATRICES`` before f3f7cb8)."""
    if is_new(plugin):
        return state(plugin).semantic.matrices
    return plugin.semantic.MATRICES


def scope_matrix(plugin: Any, db: Any, store: Any, fingerprint: str, scope: Any) -> Any:
    """The scope's matrix as a search gets it (one matrix file per project where there is one)."""
    semantic = plugin.semantic
    if hasattr(semantic, "scope_file_key"):
        return matrices(plugin).matrix(
            db, store, fingerprint, scope.session_ids, semantic.scope_file_key(scope)
        )
    return matrices(plugin).matrix(db, store, fingerprint, scope.session_ids)


def background(plugin: Any) -> Any:
    """The background indexer (``indexer.BACKGROUND`` before f3f7cb8)."""
    if is_new(plugin):
        return state(plugin).semantic.background
    return plugin.indexer.BACKGROUND


def run_search(plugin: Any, query: str, mode: str, limit: int, session_id: str) -> dict[str, Any]:
    """``search.run_search`` (the tool minus its JSON), in this process."""
    if is_new(plugin):
        return plugin.search.run_search(state(plugin), query, mode, limit, session_id)
    return plugin.search.run_search(query, mode, limit, session_id)


def _first_of(owner: Any, *names: str) -> str:
    return next(name for name in names if hasattr(owner, name))


def timed_steps(plugin: Any) -> list[tuple[Any, str, str]]:
    """(owner, attribute, label) of the steps of a search ``scale.py`` times."""
    if is_new(plugin):
        return [
            (plugin.semantic.providers.Providers, "embedder", "make_embedder (model load)"),
            (matrices(plugin), "matrix", "matrix"),
            (plugin.semantic.matrix, "top_messages", "top_messages"),
            (plugin.semantic.Semantic, "_bring_up_to_date", "index check"),
            (plugin.projects.ProjectMap, "resolve_scope", "resolve_scope"),
            # keyword_signals since the ranking moved to ranking/ (keyword_messages before)
            (plugin.search, _first_of(plugin.search, "keyword_signals", "keyword_messages"), "keyword"),
        ]
    return [
        (plugin.embedders, "make_embedder", "make_embedder (model load)"),
        (plugin.semantic.MATRICES, "matrix", "matrix"),
        (plugin.semantic, "top_messages", "top_messages"),
        (plugin.semantic, "_bring_up_to_date", "index check"),
        (plugin.scope.ProjectMap, "resolve_scope", "resolve_scope"),
        (plugin.search, "keyword_messages", "keyword"),
    ]
