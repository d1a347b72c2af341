"""``bench/replay.py`` stands for the tool only if it ranks with the tool's own code: its
``--verify`` must fail when the plugin ranks under another rule than the replay, and pass when
both rank under the same one (issue 29).

Slow (LoCoMo's home and MiniLM index are built once into ``.cache/bench``; then a few seconds per
run on a handful of questions); marked ``slow`` but part of ``make test``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from harness import REPO

pytestmark = pytest.mark.slow

QUESTIONS = ["--model", "minilm", "--limit-questions", "2"]
#: Two rules changed in the plugin's ranking: conversations by their best message alone, and the
#: strength of a match weighing far more than RRF's ranks.
OTHER_RULES = "add_the_rest=false+strength_weight=10"


def bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HERMES_HOME")}
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )


def test_replay_verify_fails_when_the_plugin_ranks_under_another_rule(tmp_path):
    recorded = tmp_path / "quality.json"
    asked = bench("quality.py", *QUESTIONS, "--policy", OTHER_RULES, "--json", str(recorded))
    assert asked.returncode == 0, asked.stdout[-3000:] + asked.stderr[-3000:]

    replayed = bench("replay.py", *QUESTIONS, "--verify", str(recorded))
    assert replayed.returncode == 1, replayed.stdout[-3000:] + replayed.stderr[-3000:]
    assert "verify FAILED" in replayed.stdout and "rankings differ" in replayed.stdout

    same = bench("replay.py", *QUESTIONS, "--policy", OTHER_RULES, "--verify", str(recorded))
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-3000:]
    assert "verify: every ranking and off-topic count equal" in same.stdout
