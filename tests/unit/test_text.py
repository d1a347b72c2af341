"""Fast unit tests of the text functions behind snippets: redaction's literal checks and the
control-character filter must change nothing but their speed."""

from __future__ import annotations

import importlib.util
import unicodedata
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

# The module itself (it imports nothing of the plugin), so the strategies below can use its labels.
_spec = importlib.util.spec_from_file_location(
    "_redaction", Path(__file__).parents[2] / "text" / "redaction.py"
)
redaction = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(redaction)

FRAGMENTS = [
    "sk-",
    "rk-proj-",
    "pk-",
    "ghp_",
    "gho_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "AKIA",
    "ASIA",
    "AIza",
    "hf_",
    "eyJ",
    ".",
    "://",
    "user:pa55@",
    "@",
    "Bearer ",
    "bearer ",
    "BEARER ",
    "bEaReR ",
    "password",
    "PASSWORD",
    "Passphrase",
    "pwd",
    "secret key",
    "API_KEY",
    "api-token",
    "client secret",
    "Credentials",
    "credentıal",
    "CREDENTİAL",
    "ſecret",
    "toKen",
    "Token",
    " is ",
    ":",
    "=",
    "：",
    "是",
    "为",
    "密码",
    "口令",
    "令牌",
    "访问令牌",
    "パスワード",
    "비밀번호",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "\n",
    " ",
    '"',
    "'",
    "，",
    "。",
    "abcdefghijklmnopqrstuvwxyz0123",
    "ABCDEFGHIJKLMNOP0123456789",
    "_-_-",
    "x",
]
# Strings each pattern matches (a removed or wrong literal check must show), in varied case.
SECRETS = [
    r"-----BEGIN [A-Z ]{0,4}PRIVATE KEY-----[a-z\n]{0,8}(-----END PRIVATE KEY-----)?",
    r"(sk|rk|pk)-([a-z0-9]{1,3}-)?[A-Za-z0-9_-]{16,20}",
    r"(gh[pousr]_[A-Za-z0-9]{20,22}|github_pat_[A-Za-z0-9_]{20,22})",
    r"glpat-[A-Za-z0-9_-]{16,18}",
    r"xox[abposr]-[A-Za-z0-9-]{10,12}",
    r"(AKIA|ASIA)[0-9A-Z]{16}",
    r"AIza[0-9A-Za-z_-]{35}",
    r"hf_[A-Za-z0-9]{20,22}",
    r"eyJ[A-Za-z0-9_-]{8,9}\.[A-Za-z0-9_-]{8,9}\.[A-Za-z0-9_-]{8,9}",
    r"[a-z]{2,5}://[a-z]{1,4}:[a-z0-9]{1,6}@[a-z]{1,5}",
    r"[Bb][Ee][Aa][Rr][Ee][Rr] [A-Za-z0-9._~+/=-]{12,14}",
    rf"({redaction._LABELS})[\"']?\s{{0,2}}([:=：]| is |是|为|為)\s{{0,2}}[\"']?[a-zA-Z0-9]{{1,8}}",
]
secrets = st.one_of([st.from_regex(pattern, fullmatch=True) for pattern in SECRETS])
mixed_case = secrets.flatmap(
    lambda text: st.sampled_from([text, text.upper(), text.swapcase(), text.replace("i", "ı")])
)
texts = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6) | mixed_case, max_size=8).map("".join)


@given(texts)
def test_redaction_with_its_shortcuts_equals_redaction_without(text):
    assert redaction.redact_secrets(text) == redaction.redact_secrets_unfiltered(text)


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
