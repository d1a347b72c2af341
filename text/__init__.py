"""Text before it leaves the machine or reaches a terminal: credentials redacted, control
characters removed, snippets bounded. Pure functions, shared by the keyword and semantic sides."""

from __future__ import annotations

from .clean import SNIPPET_CHARS, clean_title, echo, make_snippet, without_controls
from .redact import redact_secrets, scrub_error

#: Kana, CJK ideographs (with extensions and compatibility forms) and Hangul: the scripts
#: written without spaces, where one character is about one token.
CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ebef"

__all__ = [
    "CJK_CHARS",
    "SNIPPET_CHARS",
    "clean_title",
    "echo",
    "make_snippet",
    "redact_secrets",
    "scrub_error",
    "without_controls",
]
