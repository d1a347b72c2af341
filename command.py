"""``hermes project-history``: the plugin's terminal command (spec §五 step 2's configuration command)."""

from __future__ import annotations

import argparse
import json
import sys

DESCRIPTION = "Search this project's past conversations, and manage semantic search consent."


def setup_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="project_history_command", metavar="COMMAND")
    search = sub.add_parser("search", help="search the project's other conversations")
    search.add_argument("query")
    search.add_argument("--mode", choices=("hybrid", "keyword", "semantic"), default="hybrid")
    search.add_argument("--limit", type=int, default=3)
    search.add_argument("--session", default="")
    search.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from . import search

    if args.project_history_command != "search":
        print("usage: hermes project-history search QUERY", file=sys.stderr)
        return 2
    result = search.run_search(args.query, args.mode, max(1, min(args.limit, 10)), args.session)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0 if result.get("success") else 1
