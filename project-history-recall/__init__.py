"""project-history-recall: search this project's other conversations; move a conversation.

``register(ctx)`` wires the two tools (``handlers.py``) and the terminal command (``command/``) into
Hermes. Nothing slow happens at import: Hermes imports every enabled plugin at start-up, so the
modules load the standard library only, and numpy, openai and the embedding models are imported
on first use.

Everything the process remembers between calls (database schemas, scope snapshots and git's
answers, the scope's message ids, embedders and models, matrices, worker threads, the background
indexer) is owned by one :class:`ProcessState`, created on first use; modules hold constants only.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any

from . import handlers
from .config_schema import TOOLSET


class ProcessState:
    """Every per-process cache and background worker of the plugin, in one place.

    Parts are created on first use (importing their modules then), so a process that only lists
    tools pays nothing. :meth:`close` stops the threads and forgets everything; tests get a fresh
    state per test through :func:`reset_process_state`.
    """

    @cached_property
    def schemas(self) -> Any:
        """What each state.db's schema is (``store.SchemaCache``)."""
        from .store import SchemaCache

        return SchemaCache()

    @cached_property
    def projects(self) -> Any:
        """Scope snapshots per home and git's answers (``projects.ProjectsMemory``)."""
        from .projects import ProjectsMemory

        return ProjectsMemory()

    @cached_property
    def scope_ids(self) -> Any:
        """Each scope's message ids per state.db (``fulltext.ScopeIdRegisters``)."""
        from .fulltext import ScopeIdRegisters

        return ScopeIdRegisters()

    @cached_property
    def policy(self) -> Any:
        """The ranking's constants and rule switches (``ranking.RankingPolicy``): the default,
        unless a test or a benchmark sets a variant."""
        from .ranking import DEFAULT_POLICY

        return DEFAULT_POLICY

    @cached_property
    def semantic(self) -> Any:
        """Embedders, models, matrices, workers, the background indexer (``semantic.SemanticMemory``)."""
        from .semantic import SemanticMemory

        return SemanticMemory()

    def close(self) -> None:
        for name in ("semantic", "projects"):
            part = self.__dict__.pop(name, None)
            if part is not None:
                part.close()
        self.__dict__.clear()


_lock = threading.Lock()
_state: list[ProcessState] = []  # the one state of this process, once created


def process_state() -> ProcessState:
    """This process's :class:`ProcessState`, created on first use."""
    with _lock:
        if not _state:
            _state.append(ProcessState())
        return _state[0]


def reset_process_state() -> None:
    """Close this process's state; the next call starts from nothing (tests, benchmarks)."""
    with _lock:
        old = _state.pop() if _state else None
    if old is not None:
        old.close()


def _search_tool(args: Any, **kwargs: Any) -> str:
    return handlers.project_history_search(process_state(), args, **kwargs)


def _move_tool(args: Any, **kwargs: Any) -> str:
    return handlers.project_session_move(process_state(), args, **kwargs)


def _session_ended(**kwargs: Any) -> None:
    handlers.session_ended(process_state(), **kwargs)


def _command(args: Any) -> int:
    from . import command

    return command.run(process_state(), args)


def register(ctx) -> None:
    from . import command
    from .semantic import runtime

    # What `hermes project-history setup` installed under $HERMES_HOME (numpy...), appended after
    # Hermes's own packages: one stat, no import. The embedders check again at first use.
    runtime.ensure_on_path()
    ctx.register_tool(
        name="project_history_search",
        toolset=TOOLSET,
        schema=handlers.SEARCH_SCHEMA,
        handler=_search_tool,
        check_fn=handlers.check_available,
        emoji="🗂️",
    )
    ctx.register_tool(
        name="project_session_move",
        toolset=TOOLSET,
        schema=handlers.MOVE_SCHEMA,
        handler=_move_tool,
        check_fn=handlers.check_available,
        emoji="📦",
    )
    # A conversation that ends is indexed then, not inside another conversation's turn.
    ctx.register_hook("on_session_finalize", _session_ended)
    ctx.register_cli_command(
        "project-history",
        help="Project history recall: status, consent, indexing and search",
        setup_fn=command.setup_parser,
        handler_fn=_command,
        description=command.DESCRIPTION,
    )
