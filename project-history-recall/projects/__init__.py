"""Which conversations belong to which project: :mod:`attribution`'s rule applied to Hermes's data
(``scope.py``), git's answers about folders (``git.py``), and moving a conversation (``move.py``)."""

from __future__ import annotations

from .move import move_session
from .scope import ProjectMap, ProjectsMemory, Scope

__all__ = ["ProjectMap", "ProjectsMemory", "Scope", "move_session"]
