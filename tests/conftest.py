"""Fixtures live in harness.py (importable by tests as plain helpers); re-exported here."""

from harness import plugin, world  # noqa: F401
