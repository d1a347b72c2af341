"""``hermes project-history status``: :func:`gather` reads what is configured, agreed and indexed
into a :class:`Status`; :func:`lines` says it; :func:`run` prints it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .common import CommandError, counted, label

if TYPE_CHECKING:
    from .. import ProcessState

logger = logging.getLogger(__name__)


@dataclass
class ProjectStatus:
    identity: dict[str, Any]
    conversations: int  # as the search counts them: a compressed conversation once
    messages: int
    indexed: int | None  # None: not known (semantic search off or not working)
    gate: str  # ok | disabled | consent_required
    skipped: int = 0  # messages with a chunk the provider failed on alone
    busy: bool = False  # an indexer is running

    @property
    def state(self) -> str:
        """What semantic search can do for this project: never "ready" for less than all of it."""
        if self.gate != "ok":
            return self.gate
        if self.indexed is None:  # allowed, but the index cannot be read: the line above says why
            return "unavailable"
        if self.indexed == self.messages:
            return "ready"
        if self.indexed + self.skipped == self.messages:
            return f"complete except {self.skipped} skipped (the provider failed on them alone)"
        if self.busy:
            return "indexing"
        from ..store import command_line

        return f"partial: run {command_line('project-history', 'index')}"


@dataclass
class Status:
    embedding: Any  # EmbeddingSettings in effect
    problems: tuple[str, ...]  # rejected settings
    api_key_set: bool
    runtime_folder: str | None  # what setup installed, when there is any
    provider_problem: str | None  # why the provider cannot work, with what to run
    consent: dict[str, Any] | None
    consent_problem: str | None = None  # why consent.json, which exists, is no consent
    has_sessions: bool = True
    projects: list[ProjectStatus] = field(default_factory=list)
    failure: str | None = None  # why semantic search is unavailable (the command then exits non-zero)
    forgotten: int | str = 0  # conversations left out by `forget`, or why forgotten.json is unreadable


def gather(process: ProcessState) -> Status:
    from ..projects import ProjectMap
    from ..semantic import Semantic, consent_file_problem, read_consent, runtime
    from ..store import HermesDB, HermesEnv, NoSessionDatabase

    env = HermesEnv.current()
    settings = env.settings
    embedding = settings.embedding
    api_key = env.api_key()
    problem = runtime.provider_problem(embedding, api_key, settings.problems)
    folder = runtime.runtime_dir()
    status = Status(
        embedding=embedding,
        problems=settings.problems,
        api_key_set=bool(api_key),
        runtime_folder=str(folder) if folder.is_dir() else None,
        provider_problem=(
            f"{problem}; run {runtime.setup_hint(embedding.provider, settings.provider_chosen)}"
            if problem
            else None
        ),
        consent=read_consent(env),
        consent_problem=consent_file_problem(env),
        forgotten=_forgotten(env.data_dir),
    )
    try:
        db = HermesDB.open(env, process.schemas)
    except NoSessionDatabase:
        status.has_sessions = False
        return status
    if embedding.enabled and problem:
        status.failure = status.provider_problem
    semantic = Semantic(env, process.semantic, process.schemas)
    with db:
        groups = ProjectMap(db, process.projects).groups()
        coverage: list[Any] = [None] * len(groups)
        if embedding.enabled and not problem:
            try:
                coverage = list(semantic.coverage(db, semantic.embedder(), groups))
            except Exception as error:
                logger.warning("semantic index status unavailable", exc_info=True)
                status.failure = semantic.describe(error)
        for group, covered in zip(groups, coverage, strict=True):
            status.projects.append(
                ProjectStatus(
                    identity=group["identity"],
                    conversations=group["conversations"],
                    messages=len(db.live_message_ids(group["session_ids"])),
                    indexed=covered.indexed if covered else None,
                    gate=semantic.gate(group["identity"], group["folders"]),
                    skipped=covered.skipped if covered else 0,
                    busy=covered.busy if covered else False,
                )
            )
    return status


def _forgotten(data_dir: Any) -> int | str:
    from ..projects.forgotten import ForgottenUnreadable, read_entries

    try:
        return len(read_entries(data_dir))
    except (ForgottenUnreadable, OSError) as error:
        return str(error)


def lines(status: Status) -> list[str]:
    from ..config_schema import API_KEY_ENV, endpoint_of
    from ..text import without_controls

    embedding = status.embedding
    out = [
        "Semantic search settings (plugins.project-history-recall.embedding):",
        f"  enabled: {str(embedding.enabled).lower()}",
        f"  provider: {embedding.provider}   model: {embedding.model}",
        f"  endpoint: {endpoint_of(embedding)}",
        f"  chunk_size: {embedding.chunk_size}  chunk_overlap: {embedding.chunk_overlap}  "
        f"top_k: {embedding.top_k}  rrf_k: {embedding.rrf_k}  "
        f"weights: keyword {embedding.keyword_weight} / semantic {embedding.semantic_weight}",
    ]
    if embedding.provider != "local":  # the local model needs none
        out.append(f"  API key ({API_KEY_ENV}): {'set' if status.api_key_set else 'not set'}")
    out += [f"  ! {problem}" for problem in status.problems]
    if status.runtime_folder:
        out.append(f"  packages installed by setup: {status.runtime_folder}")
    if status.provider_problem:
        out.append(f"  ! semantic search cannot work: {status.provider_problem}")
    consent = status.consent
    if status.consent_problem:
        out.append(
            f"Consent: {status.consent_problem} in consent.json, so it is no consent: semantic search "
            "sends nothing until `allow`"
        )
    elif consent:
        projects = ", ".join(consent.get("projects") or []) or "none"
        if consent.get("disabled_at"):
            when = f"revoked {consent.get('disabled_at')} (given {consent.get('confirmed_at')})"
        else:
            when = f"given {consent.get('confirmed_at')}"
        out.append(
            without_controls(
                f"Consent {when}: {consent.get('provider')} "
                f"{consent.get('model')} at {consent.get('endpoint')}; projects: {projects}"
            )
        )
    else:
        out.append("Consent: none recorded (semantic search sends nothing until `allow`)")
    if isinstance(status.forgotten, str):
        out.append(f"Forgotten conversations: ! {status.forgotten}")
    elif status.forgotten:
        out.append(
            f"Forgotten conversations: {status.forgotten} (left out of every search and the index; "
            "`forget --undo ID` brings one back)"
        )
    if not status.has_sessions:
        out.append("No session database yet.")
        return out
    out.append("Projects:")
    if not status.projects:
        out.append("  (no conversations belong to a project yet)")
    for project in status.projects:
        messages = counted(project.messages, "message")
        covered = messages if project.indexed is None else f"{project.indexed} of {messages} indexed"
        out.append(
            f"  {label(project.identity)}: {counted(project.conversations, 'conversation')}, "
            f"{covered}; semantic: {project.state}"
        )
    return out


def run(process: ProcessState) -> int:
    status = gather(process)
    print("\n".join(lines(status)))
    if status.failure:
        raise CommandError(f"semantic search unavailable: {status.failure}")
    return 0
