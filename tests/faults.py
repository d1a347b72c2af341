"""Fault injection and out-of-process calls for the resilience tests (issue 7).

* Faults: damage ``embeddings.db`` (garbage, truncated, empty, a future schema), take write
  permission away from it or from the plugin's data folder, hold it locked from another process,
  or hide ``numpy``/``onnxruntime`` from a child process (a folder on ``PYTHONPATH`` whose package
  raises ``ImportError``, as a machine without the package does).
* Calls: the tool through the real ``model_tools.handle_function_call`` in a child Python (each
  call timed inside the child, around the call alone), and the real ``hermes`` CLI.

Unprivileged children: tests run as root here and in CI, and root ignores permission bits. The
brief suggested running such children as uid 65534, but the venv's interpreter lives under
``/root`` (mode 0700), which that user cannot even execute. The child keeps uid 0 and instead
loses ``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH`` and ``CAP_FOWNER`` from its capability
bounding set before ``exec``: the files are root's, so their owner bits then bind it exactly as
they bind any user (a 0444 file cannot be opened for writing, nothing can be created in a 0555
folder). :func:`assert_permissions_bind` proves that on the very path a test relies on.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import HERMES, OFFLINE, PLUGIN_KEY

PYTHON = sys.executable
MODES = ("keyword", "semantic", "hybrid")
SEARCH_TOOL = "project_history_search"
_MARK = "@@phr-call "


def data_dir(home: Path) -> Path:
    """``$HERMES_HOME/plugins/project-history-recall``: the plugin, embeddings.db, consent.json."""
    return Path(home) / "plugins" / PLUGIN_KEY


def embeddings_db(home: Path) -> Path:
    return data_dir(home) / "embeddings.db"


def companions(db: Path) -> list[Path]:
    return [Path(f"{db}{suffix}") for suffix in ("-wal", "-shm", "-journal")]


# --------------------------------------------------------------------------- semantic on


def enable_local_semantic(plugin: Any, **embedding: Any) -> None:
    """``test_semantic.enable_semantic`` with the in-process MiniLM model (no server needed)."""
    from models import minilm_model_dir
    from test_semantic import enable_semantic

    # A provider cooldown left by an earlier test of this process must not leak into this one.
    plugin.reset_process_state()
    settings = {"provider": "local", "model": "all-MiniLM-L6-v2", "model_path": str(minilm_model_dir())}
    enable_semantic(plugin, **{**settings, **embedding})


# --------------------------------------------------------------------------- privileges

_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER = 1, 2, 3
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _drop_permission_bypass() -> None:
    """In the child, between fork and exec: no more reading or writing past permission bits."""
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER):
        if _libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def unprivileged() -> dict[str, Any]:
    """``subprocess`` keyword arguments under which file permissions bind the child."""
    if os.geteuid() != 0:
        return {}
    return {"preexec_fn": _drop_permission_bypass}


def assert_permissions_bind(path: Path) -> None:
    """The test's premise: an unprivileged child cannot write ``path`` (a file or a folder)."""
    probe = (
        "import os, sys\n"
        "p = sys.argv[1]\n"
        "try:\n"
        "    if os.path.isdir(p):\n"
        "        open(os.path.join(p, '.write-probe'), 'w').close()\n"
        "    else:\n"
        "        open(p, 'r+b').close()\n"
        "except PermissionError:\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    done = subprocess.run([PYTHON, "-c", probe, str(path)], capture_output=True, text=True, **unprivileged())
    assert done.returncode == 0, f"an unprivileged child can still write {path}: {done.stderr}"


# --------------------------------------------------------------------------- children


def child_env(home: Path, pythonpath: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "HERMES_HOME": str(home), "NO_COLOR": "1", **OFFLINE}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class Call:
    """One tool call: the dispatcher's raw string and how long the call alone took."""

    mode: str
    raw: str
    seconds: float

    @property
    def data(self) -> dict[str, Any]:
        return json.loads(self.raw)


_CALLER = f"""
import json, sys, time
import model_tools

session_id, modes, query, limit = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
for mode in modes:
    args = {{"query": query, "mode": mode, "limit": limit}}
    started = time.perf_counter()
    raw = model_tools.handle_function_call({SEARCH_TOOL!r}, args, task_id="t", session_id=session_id)
    seconds = time.perf_counter() - started
    print({_MARK!r} + json.dumps({{"mode": mode, "raw": raw, "seconds": seconds}}), flush=True)
"""


def call_tool_in_child(
    home: Path,
    session_id: str,
    query: str,
    modes: Sequence[str] = MODES,
    *,
    limit: int = 3,
    pythonpath: Path | None = None,
    drop_privileges: bool = False,
    timeout: float = 240,
) -> list[Call]:
    """``project_history_search`` once per mode in a fresh Python with this home, in order."""
    done = subprocess.run(
        [PYTHON, "-c", _CALLER, session_id, json.dumps(list(modes)), query, str(limit)],
        cwd=str(home),
        env=child_env(home, pythonpath),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **(unprivileged() if drop_privileges else {}),
    )
    calls = []
    for line in done.stdout.splitlines():
        if line.startswith(_MARK):
            record = json.loads(line[len(_MARK) :])
            raw = record["raw"] if isinstance(record["raw"], str) else json.dumps(record["raw"])
            calls.append(Call(record["mode"], raw, record["seconds"]))
    assert [c.mode for c in calls] == list(modes), (
        f"the child did not answer every call (exit {done.returncode})\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )
    return calls


def call_tool_in_process(session_id: str, query: str, mode: str, limit: int = 3) -> Call:
    """The same call through this process's dispatcher (its ``HERMES_HOME``), timed alone."""
    import time

    import model_tools

    args = {"query": query, "mode": mode, "limit": limit}
    started = time.perf_counter()
    raw = model_tools.handle_function_call(SEARCH_TOOL, args, task_id="t", session_id=session_id)
    return Call(mode, raw, time.perf_counter() - started)


def run_cli(
    home: Path,
    *args: str,
    cwd: Path | str,
    pythonpath: Path | None = None,
    drop_privileges: bool = False,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """The real ``hermes`` of the venv (as :func:`harness.run_hermes`), optionally unprivileged."""
    return subprocess.run(
        [HERMES, *args],
        cwd=str(cwd),
        env=child_env(home, pythonpath),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **(unprivileged() if drop_privileges else {}),
    )


def stderr_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


# --------------------------------------------------------------------------- faults


def settle(db: Path) -> None:
    """Fold the WAL into the main file; with no other connection open, -wal and -shm go away."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    left = [p.name for p in companions(db) if p.exists()]
    assert not left, f"{left} still exist: some connection to {db.name} is still open"


def write_garbage(db: Path, size: int = 3 * 4096) -> None:
    noise = random.Random(7).randbytes(size)
    assert not noise.startswith(b"SQLite format 3")
    db.write_bytes(noise)


def truncate_to_half(db: Path, min_pages: int = 6) -> None:
    size = db.stat().st_size
    assert size >= min_pages * 4096, f"{db.name} is {size} bytes: not several pages"
    os.truncate(db, size // 2)


def empty(db: Path) -> None:
    db.write_bytes(b"")


def future_schema(db: Path, version: str = "99") -> None:
    conn = sqlite3.connect(db)
    try:
        changed = conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,)).rowcount
        conn.commit()
    finally:
        conn.close()
    assert changed == 1, "embeddings.db has no schema_version in meta"
    settle(db)


def remove_write_bits(path: Path) -> Callable[[], None]:
    """chmod a-w; returns what puts the old mode back (tmp_path must stay removable)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return lambda: path.chmod(mode)


_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=5, isolation_level=None)
conn.execute("PRAGMA locking_mode = EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('held_by_test', '1')")
print("locked", flush=True)
time.sleep(60)
"""


def hold_exclusive_lock(db: Path) -> subprocess.Popen[str]:
    """Another process writing ``db`` and keeping it locked; kill it when done."""
    holder = subprocess.Popen(
        [PYTHON, "-c", _HOLDER, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    line = holder.stdout.readline().strip()
    if line != "locked":
        holder.kill()
        _, err = holder.communicate(timeout=10)
        raise AssertionError(f"the lock holder did not lock {db}: {line!r} {err}")
    return holder


def release(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.communicate(timeout=10)


_BLOCKER = """\
# Written by the resilience tests: these packages cannot be imported in this process.
import sys

for _name in {names!r}:
    sys.modules[_name] = None  # import raises ModuleNotFoundError; importlib.util.find_spec gives None
"""


def hiding_modules(folder: Path, names: Iterable[str]) -> Path:
    """A ``PYTHONPATH`` entry under which each package named cannot be imported, as if absent.

    A shadow package (``numpy/__init__.py`` raising ``ImportError``) on ``PYTHONPATH`` is not
    enough: importing Hermes (``model_tools``, the ``hermes`` CLI) puts site-packages in front of
    it on ``sys.path``, and the real package is found again. The folder holds a ``sitecustomize``
    instead (Python imports it at start-up from ``PYTHONPATH``), which puts ``None`` in
    ``sys.modules`` for each name: an import of it then fails with ``ModuleNotFoundError`` and
    no Python frame of ours, and ``importlib.util.find_spec`` says it is not there, as on a
    machine without the package.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_BLOCKER.format(names=sorted(set(names))))
    return folder


_SLOWER = """\
# Written by the budget tests: the first import of each package named waits this long first.
import sys
import time


class _SlowImports:
    def __init__(self, delays):
        self.delays = dict(delays)

    def find_spec(self, name, path=None, target=None):
        seconds = self.delays.pop(name, None)
        if seconds:
            time.sleep(seconds)
        return None  # the usual finders go on and find the real package


sys.meta_path.insert(0, _SlowImports({delays!r}))
"""


def slowing_imports(folder: Path, delays: dict[str, float]) -> Path:
    """A ``PYTHONPATH`` entry under which the first import of each package takes ``delays[name]``
    seconds longer (a cold disk, a slow laptop), by the ``sitecustomize`` of :func:`hiding_modules`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SLOWER.format(delays=dict(delays)))
    return folder


def assert_hidden(home: Path, folder: Path, name: str) -> None:
    """The test's premise: with this folder on ``PYTHONPATH`` and Hermes loaded, ``name`` is absent."""
    probe = (
        "import model_tools\n"
        "try:\n"
        f"    import {name}\n"
        "except ImportError:\n"
        "    raise SystemExit(0)\n"
        "raise SystemExit(1)\n"
    )
    done = subprocess.run(
        [PYTHON, "-c", probe], env=child_env(home, folder), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{name} is still importable: {done.stderr[-1000:]}"
