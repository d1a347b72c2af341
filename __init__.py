"""project-history-recall: search this project's other conversations; move a conversation.

Only wiring lives here. Hermes imports every enabled plugin at start-up, so nothing slow happens
at import: the modules below load sqlite3 and json only, and numpy, openai and the embedding
models are imported on first use.
"""

from __future__ import annotations

from . import command, handlers, runtime


def register(ctx) -> None:
    # What `hermes project-history setup` installed under $HERMES_HOME (numpy...), appended after
    # Hermes's own packages: one stat, no import. make_embedder checks again at first use.
    runtime.ensure_on_path()
    ctx.register_tool(
        name="project_history_search",
        toolset=handlers.TOOLSET,
        schema=handlers.SEARCH_SCHEMA,
        handler=handlers.project_history_search,
        check_fn=handlers.check_available,
        emoji="🗂️",
    )
    ctx.register_tool(
        name="project_session_move",
        toolset=handlers.TOOLSET,
        schema=handlers.MOVE_SCHEMA,
        handler=handlers.project_session_move,
        check_fn=handlers.check_available,
        emoji="📦",
    )
    ctx.register_cli_command(
        "project-history",
        help="Project history recall: status, consent, indexing and search",
        setup_fn=command.setup_parser,
        handler_fn=command.run,
        description=command.DESCRIPTION,
    )
