"""Git probing: which repository a folder is in, as ``tui_gateway/git_probe.py`` decides it.

Hermes's CLI records a cwd but no repo root, so CLI conversations would never form automatic
repo projects without asking git. Answers are cached per process in one :class:`GitProbe`
(positive answers for the process, "not a repo" for 30 s, as Hermes's own probe does).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from .attribution import trusted_repo_root

GIT_TIMEOUT_SECONDS = 1.5
NEGATIVE_TTL_SECONDS = 30.0
FILL_BUDGET_SECONDS = 3.0


def _run_git(cwd: str, *args: str) -> str:
    """``git -C cwd ...``: stripped stdout, or "" on any failure. Never takes a lock in the repo."""
    try:
        result = subprocess.run(
            ["git", "-C", cwd, *args],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def _probe_repo_roots(cwd: str) -> tuple[str, str]:
    """(common root, worktree root): the main repository folding linked worktrees (what Hermes
    stores), and the top of the checkout the cwd is in (differs in a linked worktree)."""
    lines = _run_git(
        cwd, "rev-parse", "--path-format=absolute", "--git-common-dir", "--show-toplevel"
    ).splitlines()
    if len(lines) != 2:
        return "", ""
    git_dir, toplevel = os.path.realpath(lines[0]), lines[1]
    if os.path.basename(git_dir) == ".git":
        return os.path.dirname(git_dir), toplevel
    return toplevel, toplevel


def git_branch(cwd: str) -> str:
    return _run_git(cwd, "branch", "--show-current") or _run_git(cwd, "rev-parse", "--short", "HEAD")


def needs_probe(row: Mapping[str, Any]) -> bool:
    """A cwd whose recorded root is missing, or does not contain it (stale, or a linked worktree)."""
    cwd = (row.get("cwd") or "").strip()
    return bool(cwd) and not trusted_repo_root(cwd, row.get("git_repo_root"))


class GitProbe:
    """Per-process cache of git's answers; thread-safe, shared by every search of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roots: dict[str, tuple[str, str]] = {}
        self._not_a_repo_until: dict[str, float] = {}

    def repo_roots(self, cwd: str) -> tuple[str, str]:
        if not cwd or not os.path.isdir(cwd):
            return "", ""
        with self._lock:
            if cwd in self._roots:
                return self._roots[cwd]
            if self._not_a_repo_until.get(cwd, 0.0) > time.monotonic():
                return "", ""
        roots = _probe_repo_roots(cwd)
        with self._lock:
            if roots[0]:
                self._roots[cwd] = roots
            else:
                self._not_a_repo_until[cwd] = time.monotonic() + NEGATIVE_TTL_SECONDS
        return roots

    def common_repo_root(self, cwd: str) -> str:
        return self.repo_roots(cwd)[0]

    def fill_repo_roots(
        self, rows: Sequence[dict[str, Any]], budget_seconds: float = FILL_BUDGET_SECONDS
    ) -> list[dict[str, Any]]:
        """Rows with their git roots as git sees them now, where the recorded root cannot be trusted.

        A recorded root that does not contain the cwd is either stale (Hermes 0.19 cannot clear
        it after a move) or the main repo of a linked worktree elsewhere; git tells which, and the
        row also gets ``git_worktree_root`` (the checkout holding the cwd) so
        :func:`attribution.trusted_repo_root` can accept the worktree case. Probes run per
        distinct cwd, in parallel, within a time budget; a cwd not probed in time keeps what
        Hermes recorded for this search (and a stale root is then still ignored by the guard).
        """
        missing = sorted({r["cwd"].strip() for r in rows if needs_probe(r)})
        roots: dict[str, tuple[str, str]] = {}
        if missing:
            pool = ThreadPoolExecutor(max_workers=min(8, len(missing)))
            futures = {cwd: pool.submit(self.repo_roots, cwd) for cwd in missing}
            done, _ = wait(futures.values(), timeout=budget_seconds)
            pool.shutdown(wait=False, cancel_futures=True)
            roots = {cwd: f.result() for cwd, f in futures.items() if f in done}
        filled = []
        for row in rows:
            common, worktree = roots.get((row.get("cwd") or "").strip(), ("", ""))
            if common and needs_probe(row):
                row = {**row, "git_repo_root": common, "git_worktree_root": worktree}
            filled.append(row)
        return filled


#: The process's probe cache (git's answers do not depend on HERMES_HOME).
PROBE = GitProbe()
