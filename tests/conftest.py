"""Fixtures live in harness.py (importable by tests as plain helpers); re-exported here.

Hypothesis runs a small profile in the fast tier (``make check`` sets HYPOTHESIS_PROFILE=check)
and the full one in ``make test``."""

import os

from harness import plugin, world  # noqa: F401
from hypothesis import settings

settings.register_profile("check", max_examples=40, deadline=None, derandomize=True)
settings.register_profile("test", max_examples=1000, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "test"))
