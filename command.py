"""``hermes project-history``: the plugin's terminal command.

It is spec §五 step 2's "configuration command": ``setup`` installs and configures an embedding
provider (``setup_cmd.py``); the user (or the agent, after the user said yes in chat) runs
``allow`` to record consent; ``status`` shows what is configured, agreed and indexed; ``revoke``
turns semantic search off (``--purge`` deletes the vectors); ``index`` builds the index now;
``search`` is the agent's search for a person at a terminal. ``enable``/``disable`` are the old
names of ``allow``/``revoke`` and still work; the new names cannot be mistaken for
``hermes plugins enable/disable`` or ``hermes tools enable/disable``.

Hermes ignores a plugin command's return value, so failures end with ``SystemExit`` and a
non-zero code, and every message names what was wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

DESCRIPTION = (
    "Search this project's past conversations and manage semantic search.\n"
    "Keyword search works without any of this; semantic search needs `setup` and your consent."
)

EPILOG = """getting started:
  hermes project-history setup local --yes        install a local model (nothing leaves this machine)
  hermes project-history allow --all-projects     agree to semantic search (or --project ID)
  hermes project-history index --all-projects     build the index, with progress
  hermes project-history search how did we fix the login timeout

`allow`/`revoke` record and withdraw your consent; they are not `hermes plugins enable/disable`
(which turn the plugin itself on and off). `enable`/`disable` still work as their aliases."""

_PARSER: argparse.ArgumentParser | None = None


class CommandError(Exception):
    """A user-facing failure: printed as one line on stderr, exit code 2."""


def setup_parser(parser: argparse.ArgumentParser) -> None:
    global _PARSER
    _PARSER = parser
    parser.epilog = EPILOG
    sub = parser.add_subparsers(dest="project_history_command", metavar="COMMAND")

    from . import setup_cmd

    setup_cmd.add_parser(sub)
    sub.add_parser("status", help="settings in effect, consent, and per-project index coverage")

    enable = sub.add_parser(
        "allow",
        aliases=["enable"],
        help="record your consent to semantic search for projects and turn it on (alias: enable)",
    )
    enable.add_argument(
        "--project",
        action="append",
        default=[],
        metavar="ID",
        help="project id or slug, repo:<path>, or a folder (repeatable); default: this folder's project",
    )
    enable.add_argument("--all-projects", action="store_true", help="agree for every project of this profile")
    enable.add_argument("--yes", action="store_true", help="the user already agreed (e.g. in chat)")

    disable = sub.add_parser(
        "revoke", aliases=["disable"], help="withdraw consent: semantic search off (alias: disable)"
    )
    disable.add_argument("--purge", action="store_true", help="also delete every stored vector")

    index = sub.add_parser("index", help="build the semantic index now, with a progress bar")
    which = index.add_mutually_exclusive_group()
    which.add_argument("--project", metavar="ID", help="project id or slug, repo:<path>, or a folder")
    which.add_argument("--all-projects", action="store_true")

    search = sub.add_parser(
        "search",
        help="search a project's conversations",
        description="Search a project's conversations. Quotes around the query are optional.",
    )
    search.add_argument("query", nargs="+", help="words of the query (no quotes needed)")
    search.add_argument("--mode", choices=("hybrid", "keyword", "semantic"), default="hybrid")
    search.add_argument("--limit", type=int, default=3, help="sessions to show, 1 to 10 (default 3)")
    where = search.add_mutually_exclusive_group()
    where.add_argument("--cwd", metavar="DIR", help="search as a conversation in DIR (default: here)")
    where.add_argument("--session", metavar="ID", help="search as this conversation")
    search.add_argument("--json", action="store_true", help="print the tool's JSON result")


def run(args: argparse.Namespace) -> int:
    from . import setup_cmd

    handlers = {
        "setup": setup_cmd.run,
        "status": _status,
        "allow": _enable,
        "enable": _enable,
        "revoke": _disable,
        "disable": _disable,
        "index": _index,
        "search": _search,
    }
    handler = handlers.get(getattr(args, "project_history_command", None) or "")
    if handler is None:  # bare `hermes project-history`: full help, as Hermes's own commands do
        if _PARSER is not None:
            _PARSER.print_help()
        else:
            print("usage: hermes project-history {setup,status,allow,revoke,index,search} ...")
        return 0
    try:
        code = handler(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except (CommandError, setup_cmd.SetupError) as error:
        print(f"hermes project-history: {error}", file=sys.stderr)
        code = 2
    except BrokenPipeError:  # `... | head -1`: the reader has gone; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 0
    except KeyboardInterrupt:
        code = 130
    if code:
        raise SystemExit(code)
    return 0


# --------------------------------------------------------------------------- helpers


def _settings():
    from . import store

    return store.read_settings()


def _identity_for(token: str) -> dict[str, Any]:
    """A project named on the command line: id/slug, ``repo:<path>``, or a folder inside one."""
    from . import attribution, store

    token = token.strip()
    if not token:
        raise CommandError("an empty project name was given")
    if token.startswith("repo:"):
        key = attribution.path_key(token[len("repo:") :])
        if not key:
            raise CommandError(f"not a repository path: {token!r}")
        return {"kind": "auto", "key": key}
    project = store.read_project(token)
    if project is not None:
        return {"kind": "explicit", "id": project["id"], "name": project["name"]}
    if os.path.isdir(token):
        return _identity_of_folder(os.path.abspath(token))
    raise CommandError(f"project not found: {token} (use a project id or slug, repo:<path>, or a folder)")


def _identity_of_folder(folder: str) -> dict[str, Any]:
    from . import attribution, store

    row = store.fill_repo_roots([{"id": "", "cwd": folder, "git_repo_root": None}])[0]
    identity = attribution.resolve_project(row, store.read_projects(), junk_roots=store.junk_roots())
    if identity["kind"] == "home":
        raise CommandError(
            f"{folder} is in no project or git repository; pass --project ID or --all-projects"
        )
    return identity


def _label(identity: dict[str, Any]) -> str:
    if identity.get("kind") == "explicit":
        return f"{identity.get('name')} ({identity.get('id')})"
    if identity.get("kind") == "auto":
        return f"repository {identity.get('key')}"
    return "Home"


def _save_plugin_settings(values: dict[str, Any]) -> None:
    from hermes_cli.config import save_config

    from .config_schema import PLUGIN_KEY

    save_config({"plugins": {PLUGIN_KEY: {"embedding": values}}}, merge_existing=True)


def _profile() -> str:
    from . import store

    return store.active_profile_name()


# --------------------------------------------------------------------------- status


def _status(args: argparse.Namespace) -> int:
    from . import runtime, search, store
    from .config_schema import endpoint_of, semantic_gate

    settings = _settings()
    embedding = settings.embedding
    consent = store.read_consent()
    print("Semantic search settings (plugins.project-history-recall.embedding):")
    print(f"  enabled: {str(embedding.enabled).lower()}")
    print(f"  provider: {embedding.provider}   model: {embedding.model}")
    print(f"  endpoint: {endpoint_of(embedding)}")
    print(
        f"  chunk_size: {embedding.chunk_size}  chunk_overlap: {embedding.chunk_overlap}  "
        f"top_k: {embedding.top_k}  rrf_k: {embedding.rrf_k}  "
        f"weights: keyword {embedding.keyword_weight} / semantic {embedding.semantic_weight}"
    )
    api_key = store.read_api_key()
    print(f"  API key ({'PROJECT_HISTORY_EMBEDDING_API_KEY'}): {'set' if api_key else 'not set'}")
    for problem in settings.problems:
        print(f"  ! {problem}")
    problem = runtime.provider_problem(embedding, api_key, settings.problems)
    runtime_folder = runtime.runtime_dir()
    if runtime_folder.is_dir():
        print(f"  packages installed by setup: {runtime_folder}")
    if problem:
        print(f"  ! semantic search cannot work: {problem}; run {runtime.setup_hint(embedding.provider)}")
    if consent:
        projects = ", ".join(consent.get("projects") or []) or "none"
        if consent.get("disabled_at"):
            when = f"revoked {consent.get('disabled_at')} (given {consent.get('confirmed_at')})"
        else:
            when = f"given {consent.get('confirmed_at')}"
        print(
            f"Consent {when}: {consent.get('provider')} "
            f"{consent.get('model')} at {consent.get('endpoint')}; projects: {projects}"
        )
    else:
        print("Consent: none recorded (semantic search sends nothing until `allow`)")

    if not store.state_db_path().exists():
        print("No session database yet.")
        return 0
    groups = search.project_overview()
    fingerprint = None if problem else _fingerprint_or_none(settings)
    print("Projects:")
    if not groups:
        print("  (no conversations belong to a project yet)")
    for group in groups:
        gate = semantic_gate(embedding, consent, group["identity"], _profile())
        indexed = "n/a"
        if fingerprint:
            indexed = str(search.indexed_messages(fingerprint, group["session_ids"]))
        print(
            f"  {_label(group['identity'])}: {len(group['session_ids'])} sessions, "
            f"{group['messages']} messages, {indexed} indexed; semantic: {gate}"
        )
    return 0


def _fingerprint_or_none(settings: Any) -> str | None:
    from . import store
    from .embedders import EmbeddingUnavailable, make_embedder

    try:
        return make_embedder(settings.embedding, store.read_api_key()).fingerprint
    except EmbeddingUnavailable as error:
        print(f"  ! embedding provider unavailable: {error}")
        return None


# --------------------------------------------------------------------------- enable / disable


def _enable(args: argparse.Namespace) -> int:
    from . import runtime, store
    from .config_schema import ALL_PROJECTS, consent_record, endpoint_of, project_ref

    if args.all_projects and args.project:
        raise CommandError("use either --project or --all-projects, not both")
    if args.all_projects:
        refs, labels = [ALL_PROJECTS], ["every project of this profile"]
    else:
        identities = [_identity_for(t) for t in args.project] or [_identity_of_folder(os.getcwd())]
        refs, labels = [project_ref(i) for i in identities], [_label(i) for i in identities]

    settings = _settings()
    embedding = settings.embedding
    problem = runtime.provider_problem(embedding, store.read_api_key(), settings.problems)
    if problem:
        raise CommandError(
            f"semantic search cannot work yet ({problem}); run {runtime.setup_hint(embedding.provider)}"
        )
    endpoint = endpoint_of(embedding)
    where = (
        "this machine (in-process model; nothing leaves it)" if embedding.provider == "local" else endpoint
    )
    print("Semantic search will send the text of user and assistant messages")
    print(f"  of: {'; '.join(labels)}")
    print("  what: past conversations now, and new messages as they are searched (history+incremental)")
    print(f"  to: {embedding.provider} model '{embedding.model}' at {where}")
    print(f"  stored: vectors only, in {store.embeddings_db_path()}")
    if not args.yes:
        if not sys.stdin or not sys.stdin.isatty():
            raise CommandError("confirmation needed: run again with --yes once the user has agreed")
        if input("Agree and enable? [y/N] ").strip().lower() not in ("y", "yes"):
            print("Nothing changed.")
            return 1

    consent = store.read_consent()
    same_target = bool(consent) and (
        (consent.get("provider"), consent.get("endpoint"), consent.get("model"), consent.get("profile"))
        == (embedding.provider, endpoint, embedding.model, _profile())
    )
    if same_target and not consent.get("disabled_at"):
        refs = [*consent.get("projects", []), *refs]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    store.write_consent(consent_record(embedding, _profile(), refs, stamp))
    _save_plugin_settings({"enabled": True})
    print(f"Allowed. Consent recorded in {store.consent_path()}")
    scope = " --all-projects" if args.all_projects else ""
    print(f"Build the index now: hermes project-history index{scope}")
    return 0


def _disable(args: argparse.Namespace) -> int:
    from . import store

    _save_plugin_settings({"enabled": False})
    consent = store.read_consent()
    if consent:
        consent["disabled_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        store.write_consent(consent)
    print("Consent revoked: semantic search is off; nothing is sent to any embedding provider.")
    if args.purge:
        removed = store.purge_embeddings()
        print("Stored vectors deleted." if removed else "No stored vectors to delete.")
    return 0


# --------------------------------------------------------------------------- index


def _index(args: argparse.Namespace) -> int:
    from . import search, semantic, store
    from .config_schema import semantic_gate
    from .embedders import EmbeddingUnavailable, make_embedder

    if not store.state_db_path().exists():
        raise CommandError("session database not found")
    settings = _settings()
    consent = store.read_consent()
    groups = search.project_overview()
    if args.all_projects:
        chosen = groups
    else:
        identity = _identity_for(args.project) if args.project else _identity_of_folder(os.getcwd())
        chosen = [g for g in groups if g["identity"] == identity] or [
            {"identity": identity, "session_ids": [], "messages": 0}
        ]
    refused = [
        g for g in chosen if semantic_gate(settings.embedding, consent, g["identity"], _profile()) != "ok"
    ]
    if refused:
        names = ", ".join(_label(g["identity"]) for g in refused)
        raise CommandError(
            f"semantic search is not enabled for {names}; run `hermes project-history allow` first"
        )
    try:
        embedder = make_embedder(settings.embedding, store.read_api_key())
    except EmbeddingUnavailable as error:
        raise CommandError(f"embedding provider unavailable: {error}") from None

    from .index_progress import IndexProgress

    total_written, started = 0, time.monotonic()
    with IndexProgress() as progress:
        for group in chosen:
            counting = progress.track(_label(group["identity"]), embedder)
            try:
                written, complete = semantic.build_index(
                    group["session_ids"], settings, counting, progress=counting.report
                )
            except EmbeddingUnavailable as error:
                raise CommandError(f"embedding provider unavailable: {error}") from None
            if not complete:
                raise CommandError("another process is indexing right now; try again when it finishes")
            total_written += written
    seconds = time.monotonic() - started
    print(
        f"Indexed {len(chosen)} project(s): {total_written} chunks embedded in {seconds:.1f}s "
        f"({embedder.texts_embedded} texts sent to the provider)."
    )
    return 0


# --------------------------------------------------------------------------- search


def _search(args: argparse.Namespace) -> int:
    from . import search, store

    query = " ".join(args.query)
    if not query.strip():
        raise CommandError("the query is empty")
    if not 1 <= args.limit <= 10:
        raise CommandError("--limit must be from 1 to 10")
    cwd = os.path.abspath(args.cwd) if args.cwd else os.getcwd()
    if args.cwd and not os.path.isdir(cwd):
        raise CommandError(f"no such folder: {args.cwd}")
    if args.session is not None:
        if not store.state_db_path().exists():
            raise CommandError("session database not found")
        with store.reading(store.state_db_path()) as conn:
            found = args.session.strip() and store.read_session(conn, store.detect_schema(conn), args.session)
            if not found:
                raise CommandError(f"session not found: {args.session}")
    # build_index=False: a terminal search never starts indexing it would abandon on exit.
    result = search.run_search(query, args.mode, args.limit, args.session or "", cwd, build_index=False)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0 if result.get("success") else 1
    if not result.get("success"):
        raise CommandError(result.get("error", "search failed"))
    print(_readable(result))
    return 0


def _readable(result: dict[str, Any]) -> str:
    lines = []
    if result.get("project"):
        lines.append(
            f"Project: {_label(result['project'])}  ·  {result.get('sessions_in_scope')} sessions  ·  "
            f"semantic: {result.get('semantic_status')}"
        )
    if result.get("message"):
        lines.append(result["message"])
    for number, hit in enumerate(result.get("results", []), start=1):
        lines.append(f"{number}. {hit.get('title') or '(untitled)'}  [{hit['when']}]  {hit['link']}")
        lines.append(f"   {hit['snippet']}")
        lines.append(f"   found by: {hit['score_source']}, message {hit['message_id']}")
    consent = result.get("semantic_consent")
    if consent:
        lines.append(f"Semantic search needs consent: {consent['on_yes_run']}")
    elif result.get("mode") != "keyword" and result.get("semantic_status") in ("partial", "indexing"):
        lines.append(
            "Semantic search skipped: this project's index is not complete (results above are "
            "keyword matches). Build it with: hermes project-history index"
        )
    elif result.get("semantic_status") == "unavailable" and result.get("semantic_reason"):
        lines.append(f"Semantic search unavailable: {result['semantic_reason']}")
    return "\n".join(lines)
