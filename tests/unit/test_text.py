"""text/: control characters out, snippets, titles, echoes (redaction itself: test_redact.py)."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st


@given(st.text(max_size=60))
def test_control_characters_become_spaces_and_nothing_else_changes(phr, text):
    expected = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Cs") else ch for ch in text)
    assert phr.text.without_controls(text) == expected


def test_the_control_class_is_every_cc_cf_cs_character_of_this_python(phr):
    """text.clean.CONTROL_CHARACTERS is written out for Unicode 14.0 (Python 3.11); a Python with
    a newer Unicode database may know more format characters: then regenerate it."""
    import re
    import sys

    pattern = re.compile(f"[{phr.module('text.clean').CONTROL_CHARACTERS}]")
    wanted = {c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in ("Cc", "Cf", "Cs")}
    matched = {c for c in range(sys.maxunicode + 1) if pattern.fullmatch(chr(c))}
    assert matched == wanted, unicodedata.unidata_version


# --------------------------------------------------------------------------- snippets


def test_a_short_message_is_its_own_snippet_with_whitespace_folded(phr):
    assert phr.text.make_snippet("  the cache\n\n  expires\tsoon ", ["cache"]) == "the cache expires soon"


def test_a_long_message_is_cut_around_the_first_match_at_word_boundaries(phr):
    words = [f"word{i:03d}" for i in range(200)]
    text = " ".join([*words[:120], "needle", *words[120:]])
    snippet = phr.text.make_snippet(text, ["absent", "NEEDLE"], width=80)
    assert snippet.startswith("…") and snippet.endswith("…")
    body = snippet.strip("…")
    assert "needle" in body and len(body) <= 80
    assert body.split()[0] in words and body.split()[-1] in words  # no word cut in half
    assert body.index("needle") < len(body) // 2  # the match sits in the first half


def test_a_snippet_without_a_match_starts_at_the_beginning(phr):
    text = "start " + "x " * 400
    snippet = phr.text.make_snippet(text, ["nowhere"], width=50)
    assert snippet.startswith("start") and snippet.endswith("…")


def test_snippets_lose_control_characters_and_credentials_even_split_by_a_zero_width_space(phr):
    split = phr.text.make_snippet("key sk-abcdefghij\u200bklmnopqrstuvwx end", ["key"])
    assert "klmnopqrstuvwx" not in split and "[redacted]" in split


def test_snippets_lose_control_characters_and_credentials(phr):
    snippet = phr.text.make_snippet("\x1b]0;title\x07 key sk-abcdefghijklmnopqrstuvwx\u202e!", ["key"])
    assert "\x1b" not in snippet and "\u202e" not in snippet and "\x07" not in snippet
    assert "sk-abcdefghijklmnopqrstuvwx" not in snippet and "[redacted]" in snippet


def test_echo_bounds_and_escapes_what_the_agent_sent(phr):
    echo = phr.text.echo
    assert echo("p_abc") == "p_abc"
    assert echo("a\nb\x1b") == "a\\u000ab\\u001b"
    long = "x" * 100
    assert echo(long) == "x" * 64 + "… (100 characters)"
    assert echo("\ud800") == "\\ud800"
