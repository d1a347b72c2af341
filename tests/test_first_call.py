"""What a fresh process pays for its first search: every ``hermes chat -q`` is one.

A keyword search reports ``semantic_status``, which needs only the model's identity (its
fingerprint and token limit), never the model: it must not import numpy or the ONNX runtime, nor
load the model, once any earlier process has loaded that model (``embedders.model_identity``).
"""

from __future__ import annotations

import json
import os
import subprocess

import faults
from harness import session_ids
from test_resilience import QUERY, indexed  # noqa: F401  (the fixture: a complete MiniLM index)

_MARK = "@@first-call "
_CHILD = f"""
import json, sys, time
import model_tools

session_id, modes, query = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
for mode in modes:
    started = time.perf_counter()
    args = {{"query": query, "mode": mode, "limit": 3}}
    raw = model_tools.handle_function_call({faults.SEARCH_TOOL!r}, args, task_id="t", session_id=session_id)
    loaded = sorted(name for name in ("numpy", "onnxruntime", "tokenizers") if name in sys.modules)
    print({_MARK!r} + json.dumps({{"mode": mode, "result": json.loads(raw), "loaded": loaded,
                                   "seconds": time.perf_counter() - started}}), flush=True)
"""


def fresh_process(world, *modes: str) -> list[dict]:
    done = subprocess.run(
        [faults.PYTHON, "-c", _CHILD, world.current, json.dumps(list(modes)), QUERY],
        cwd=str(world.home),
        env=faults.child_env(world.home),
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    calls = [json.loads(line[len(_MARK) :]) for line in done.stdout.splitlines() if line.startswith(_MARK)]
    assert [c["mode"] for c in calls] == list(modes), done.stderr[-3000:]
    return calls


def test_a_keyword_search_in_a_fresh_process_loads_no_model(indexed):  # noqa: F811
    (keyword, hybrid) = fresh_process(indexed, "keyword", "hybrid")
    assert keyword["result"]["semantic_status"] == "ready", keyword
    assert session_ids(keyword["result"]) == indexed.baseline
    assert keyword["loaded"] == [], "a keyword search imported what only semantic search needs"
    # The identity it trusted is the model's: the hybrid call that loads the model agrees.
    assert hybrid["result"]["semantic_status"] == "ready", hybrid
    assert hybrid["loaded"] == ["numpy", "onnxruntime", "tokenizers"]


def test_a_changed_model_folder_is_never_taken_for_the_remembered_one(indexed, plugin):  # noqa: F811
    model_path = plugin.store.HermesEnv.current().settings.embedding.model_path
    # What the index needs to know about the model can change with any file of the folder (a
    # re-installed model, another tokenizer): then the identity is computed from the model again.
    tokenizer = os.path.join(model_path, "tokenizer.json")
    before = os.stat(tokenizer)
    try:
        os.utime(tokenizer, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        (keyword,) = fresh_process(indexed, "keyword")
        assert keyword["result"]["semantic_status"] == "ready", keyword
        assert keyword["loaded"] == ["numpy", "onnxruntime", "tokenizers"], "a stale identity was trusted"
        (again,) = fresh_process(indexed, "keyword")  # remembered again by the process that loaded it
        assert again["loaded"] == [] and again["result"]["semantic_status"] == "ready", again
    finally:
        os.utime(tokenizer, ns=(before.st_atime_ns, before.st_mtime_ns))
