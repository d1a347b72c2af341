"""Text before it leaves the machine or reaches a terminal: credentials redacted, control
characters removed, snippets bounded. Pure functions, shared by the keyword and semantic sides."""

from __future__ import annotations

from .clean import ANSWER_CHARS, SNIPPET_CHARS, clean_title, echo, make_snippet, without_controls
from .redact import char_set, redact_secrets, scrub_error

#: Kana, CJK ideographs (with extensions and compatibility forms) and Hangul: the scripts
#: written without spaces, where one character is about one token.
CJK_CHARS = char_set(
    (
        (0x3040, 0x30FF),
        (0x3400, 0x4DBF),
        (0x4E00, 0x9FFF),
        (0xAC00, 0xD7AF),
        (0xF900, 0xFAFF),
        (0x20000, 0x2EBEF),
    )
)

__all__ = [
    "ANSWER_CHARS",
    "CJK_CHARS",
    "SNIPPET_CHARS",
    "clean_title",
    "echo",
    "make_snippet",
    "redact_secrets",
    "scrub_error",
    "without_controls",
]
