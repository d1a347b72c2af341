"""Text as the plugin shows it to a model or a terminal: control characters out, credentials
redacted (:mod:`.redact`), bounded snippets around what matched. Pure: no I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .redact import char_set, redact_secrets

SNIPPET_CHARS = 240
#: The answer window's budget (issue 30.3: the reply after a matched question, or the question a
#: matched reply answered). 1.5x a snippet: a fix or a decision is a sentence or three; at about
#: 4 characters a token that is at most ~90 tokens a result (a Chinese window, about a character a
#: token, up to ~360): the cost is in docs/benchmarks.md, "Answer windows". Not a ranking constant.
ANSWER_CHARS = 360


#: Control (Cc), format (Cf) and surrogate (Cs) characters as of Unicode 14.0 (Python 3.11's
#: ``unicodedata``; tests/unit/test_text.py checks it against the running Python).
CONTROL_CHARACTERS = char_set(
    (
        (0x0000, 0x001F),
        (0x007F, 0x009F),
        0x00AD,
        (0x0600, 0x0605),
        0x061C,
        0x06DD,
        0x070F,
        (0x0890, 0x0891),
        0x08E2,
        0x180E,
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x2064),
        (0x2066, 0x206F),
        (0xD800, 0xDFFF),
        0xFEFF,
        (0xFFF9, 0xFFFB),
        0x110BD,
        0x110CD,
        (0x13430, 0x13438),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        0xE0001,
        (0xE0020, 0xE007F),
    )
)
_CONTROLS = re.compile(f"[{CONTROL_CHARACTERS}]")


def without_controls(text: str) -> str:
    """Control and format characters (NUL, escapes, bidi overrides, lone surrogates) become spaces:
    a snippet is quoted text for a model and a terminal, and none of them may act on either."""
    return _CONTROLS.sub(" ", text)


def make_snippet(text: str, needles: Sequence[str], width: int = SNIPPET_CHARS) -> str:
    """The part of the message around the first matching term, whitespace folded, bounded.

    Control characters are removed: a snippet is quoted text for a model and a terminal, and an
    escape sequence or a bidi override in history must not act on either. Credential-looking
    spans are replaced: the tool result goes to the model's provider, off this machine.
    """
    # Redaction first: it reads through zero-width characters that would be spaces afterwards.
    text = " ".join(without_controls(redact_secrets(text)).split())
    if len(text) <= width:
        return text
    folded = text.casefold()
    positions = [folded.find(n.casefold()) for n in needles if n]
    hit = min((p for p in positions if p >= 0), default=0)
    start = max(0, hit - width // 3)
    end = min(len(text), start + width)
    start = max(0, end - width)
    if start > 0 and " " in text[start : start + 20]:
        start = text.index(" ", start) + 1
    if end < len(text) and " " in text[end - 20 : end]:
        end = text.rindex(" ", start, end)
    return ("…" if start > 0 else "") + text[start:end] + ("…" if end < len(text) else "")


def clean_title(title: str | None) -> str | None:
    """A session title as a snippet is shown: control characters out, credentials redacted,
    whitespace folded (a title is conversation text, written by a model from what was said)."""
    if not title:
        return title
    return " ".join(without_controls(redact_secrets(title)).split())


MAX_ECHO_CHARS = 64


def echo(value: str) -> str:
    """What the agent sent, safe to put in an answer: bounded, and with every character that is
    not printable (control characters, lone surrogates that cannot be encoded) as ``\\uXXXX``."""
    shown = "".join(
        ch if ch.isprintable() else f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"
        for ch in value[:MAX_ECHO_CHARS]
    )
    if len(value) > MAX_ECHO_CHARS:
        shown += f"… ({len(value)} characters)"
    return shown
