"""Credentials out of text before it leaves the machine: :func:`redact_secrets`, :func:`scrub_error`.

Conversations hold pasted keys, passwords and private keys. Message text goes to a remote embedding
provider, snippets and titles go to the chat model's provider, so every credential-looking span is
replaced by :data:`PLACEHOLDER` first. The label stays (``password: [redacted]``, ``Authorization:
Bearer [redacted]``, ``postgres://app:[redacted]@db``, the ``-----BEGIN``/``-----END`` lines of a
key), so the text still says what was there and stays searchable.

How a text is read:

* **Normalised, then redacted in place.** Rules run on a view of the text in which each character
  is NFKC-normalised on its own (full-width ``ｐａｓｓｗｏｒｄ：`` reads ``password:``) and zero-width
  and other invisible format characters are dropped (a key split by U+200B reads whole). Each span
  found in the view is mapped back to the original, and only those spans change: a text with
  nothing to redact comes back as it came (the same object), and a redacted one differs from it only
  where a span was.
* **Rules** (see :data:`RULES`), each skipped unless a literal it needs occurs in the text:

  - ``armor``: blocks whose label says ``PRIVATE``, ``SECRET`` or ``ENCRYPTED`` (PEM, PKCS#8,
    OpenSSH, PGP): the body up to ``-----END``, or to the end of the text when there is none; a
    body whose BEGIN was cut off (the base64 lines above an ``-----END`` line); and, with no armour
    left at all, two or more lines of random base64 the width of a key body (the middle chunk of a
    long key). Certificates and public keys stay.
  - ``prefix``: provider tokens by prefix. The list is Hermes's own, ``agent.redact._PREFIX_PATTERNS``
    (40+ prefixes, maintained there), imported at first use; outside Hermes a small fallback of the
    common ones (:data:`FALLBACK_PREFIX_PATTERNS`). Always added: the two shapes that list lacks
    (GitLab ``glpat-``, AWS ``ASIA`` ids). A match runs on over dotted parts (SendGrid's
    ``SG.<id>.<secret>``) and over a next line that is nothing but the rest of the token.
  - ``token``: JWTs, Slack and Discord webhook URLs, Telegram bot tokens (``<id>:AA…``), and AWS
    secret access keys (a random 40-character base64 token in a text that holds an AWS key id, or
    says both "aws" and "secret").
  - ``url``: the password of ``scheme://user:password@host`` (split at the last ``@``, so a password
    may hold ``@``), a bare random token as userinfo, random values of credential query parameters
    (``sig=``, ``X-Amz-Signature=``, ``code=``...).
  - ``header``: ``Authorization:``/``Proxy-Authorization:`` of any scheme (the scheme word stays),
    a bare ``Bearer <random>`` or ``Basic <base64 of user:password>``, random ``Cookie:`` values.
  - ``command``: ``--password value`` and other secret-naming flags, ``mysql -p<password>``,
    ``docker login -p``, ``sshpass -p``, ``redis-cli -a``, ``curl -u user:password``,
    ``openssl -passin pass:…``, ``auth=("user", "password")``, ``.netrc``; a JSON Web Key's
    private members (``"d"`` and the others beside ``"kty"``), a raw key or ed25519 seed in hex
    after a ``seed``/``private key`` label.
  - ``label``: ``key=value``, ``key: value``, ``"key": "value"``, ``KEY="value"``, ``key := value``,
    ``${KEY:-default}``, ``密码：…``, ``password is …`` where the key names a secret
    (``DB_PASSWORD``, ``aws_secret_access_key``, ``authToken``, ``client-secret``, ``密钥``...).
    What the key names decides what the value must look like: a password's value runs to the end of
    the line (``password: correct horse battery staple``), up to where a next ``key:`` starts; a
    token's is one word of eight characters or more that is not a plain word; a bare ``key``
    (``AZURE_OPENAI_KEY``, ``AccountKey``) or any other secret word followed by an unknown word
    counts only when its value looks random; after ``is`` a password needs a digit or a symbol
    (``the password is required`` stays). Values that are code or stand-ins stay
    (``self.api_key = api_key``, ``password: str``, ``token: ${{ secrets.TOKEN }}``,
    ``os.environ["KEY"]``, ``<your-key>``, ``[REDACTED]``, ``***``); of prose (six words or more,
    bold, or in a script other than Latin) only a first word that is no plain word goes. Keys whose
    last word says they are not the secret stay too (``password_hash``, ``token_count``,
    ``max_tokens``, ``api_key_id``, ``public_key``).
  - ``gitleaks``: gitleaks' default rules (8.30.1, MIT, see gitleaks_rules.LICENSE), shipped as
    data beside this module (``gitleaks_rules.json``, made by bench/gitleaks_rules.py from
    upstream's ``gitleaks.toml``): provider shapes by prefix and name-keyed values
    (``mailgun: key-...``), with their entropy thresholds and allowlists. Without the file the
    rules above run alone.

* Idempotent (the placeholder is a stand-in value to every rule), never raises (an internal failure
  yields :data:`PLACEHOLDER` alone: fail closed), and not switched off by Hermes's
  ``HERMES_REDACT_SECRETS``: only Hermes's list of patterns is borrowed, never its redactor.

Standard library only; no module state but compiled patterns and constants (Hermes's list and
gitleaks' rules are read once, through :func:`functools.cache`). What a text costs: a few scans
of it (label words on the lowered text; runs of token characters; its words, split once, among
which a long text's cues of letters and digits and gitleaks' keywords are looked for), then only
the rules whose cues are there and whose secret could fit (a rule that needs a run of 32 token
characters skips a text without one). The output never depends on those shortcuts: each skips
only what cannot match. Figures: docs/benchmarks.md, "Redaction" (issue 31 asks for at most 1.2
times 352b34c's redaction per keyword search). detect-secrets (1.5, default plugins, line by
line) is not used,
not even optionally: on the first 1,500 of those messages it took about 200 times as long per
message and flagged 84% of them (its entropy and keyword detectors are meant for files with a
baseline of accepted findings), and even counting any overlapping finding as a catch it missed
three of the corpus's shapes (a service account's JSON key, .env lines, a full-width label).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import importlib
import itertools
import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

PLACEHOLDER = "[redacted]"

__all__ = ("PLACEHOLDER", "RULES", "char_set", "explain", "redact_secrets", "scrub_error")

# --------------------------------------------------------------------------- the normalised view


def char_set(points: Iterable[int | tuple[int, int]]) -> str:
    """The inside of a ``[...]`` set matching ``points``, ``(first, last)`` pairs or single code
    points: ``char_set([(0x41, 0x5A), 0x5F])`` is ``"A-Z_"``, each character escaped.

    Unicode tables are kept as numbers, not strings of ``\\u`` escapes: they read as the
    standard's tables do, and Hermes's install scan takes long escape chains for obfuscation (one
    finding per line, shown to the user who installs). Here because this module loads on its own
    (benchmarks load it by path); the other text modules import it from here."""
    parts = []
    for point in points:
        first, last = point if isinstance(point, tuple) else (point, point)
        one = re.escape(chr(first))
        parts.append(one if first == last else f"{one}-{re.escape(chr(last))}")
    return "".join(parts)


#: Dropped from the view: format characters (Unicode 14 ``Cf``: soft hyphen, zero-width space and
#: joiners, word joiner, BOM, bidi controls, tags) and invisible marks and fillers (combining
#: grapheme joiner, variation selectors, Mongolian selectors, Hangul fillers, Khmer inherent vowels).
DROPPED_CHARACTERS = char_set(
    (
        0x00AD,
        0x034F,
        (0x0600, 0x0605),
        0x061C,
        0x06DD,
        0x070F,
        (0x0890, 0x0891),
        0x08E2,
        0x115F,
        0x1160,
        0x17B4,
        0x17B5,
        (0x180B, 0x180F),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x2064),
        (0x2066, 0x206F),
        0x3164,
        (0xFE00, 0xFE0F),
        0xFEFF,
        0xFFA0,
        (0xFFF9, 0xFFFB),
        0x110BD,
        0x110CD,
        (0x13430, 0x13438),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        0xE0001,
        (0xE0020, 0xE007F),
        (0xE0100, 0xE01EF),
    )
)
#: Non-ASCII ranges in which every character is its own NFKC form and none is dropped (Latin,
#: Greek, Cyrillic, Hebrew, Arabic, Devanagari, Thai letters, quotes, symbols, kana, CJK ideographs,
#: Hangul, emoji): a text's other non-ASCII characters are normalised one by one.
#: tests/unit/test_redact.py checks both lists against the running Python's ``unicodedata``.
STABLE_CHARACTERS = char_set(
    (
        (0x0080, 0x009F),
        (0x00A1, 0x00A7),
        0x00A9,
        (0x00AB, 0x00AC),
        0x00AE,
        (0x00B0, 0x00B1),
        (0x00B6, 0x00B7),
        0x00BB,
        (0x00BF, 0x0131),
        (0x0134, 0x013E),
        (0x0141, 0x0148),
        (0x014A, 0x017E),
        (0x0180, 0x01C3),
        (0x01CD, 0x01F0),
        (0x01F4, 0x024F),
        (0x0370, 0x0373),
        (0x0375, 0x0377),
        (0x037B, 0x037D),
        0x037F,
        0x0386,
        (0x0388, 0x038A),
        0x038C,
        (0x038E, 0x03A1),
        (0x03A3, 0x03CF),
        (0x03D7, 0x03EF),
        0x03F3,
        (0x03F6, 0x03F8),
        (0x03FA, 0x052F),
        (0x0591, 0x05C7),
        (0x05D0, 0x05EA),
        (0x05EF, 0x05F4),
        (0x0606, 0x061B),
        (0x061D, 0x0674),
        (0x0679, 0x06DC),
        (0x06DE, 0x06FF),
        (0x0900, 0x0957),
        (0x0960, 0x097F),
        (0x0E01, 0x0E32),
        (0x0E34, 0x0E3A),
        (0x0E3F, 0x0E5B),
        (0x1E00, 0x1E99),
        (0x1E9C, 0x1EFF),
        0x2010,
        (0x2012, 0x2016),
        (0x2018, 0x2023),
        (0x2027, 0x2029),
        (0x2030, 0x2032),
        0x2035,
        (0x2038, 0x203B),
        0x203D,
        (0x203F, 0x2046),
        (0x204A, 0x2056),
        (0x2058, 0x205E),
        (0x20A0, 0x20A7),
        (0x20A9, 0x20C0),
        (0x20D0, 0x20F0),
        (0x2190, 0x222B),
        0x222E,
        (0x2231, 0x2328),
        (0x232B, 0x2426),
        (0x2440, 0x244A),
        (0x24EB, 0x2A0B),
        (0x2A0D, 0x2A73),
        (0x2A77, 0x2ADB),
        (0x2ADD, 0x2B73),
        (0x2B76, 0x2B95),
        (0x2B97, 0x2BFF),
        (0x3001, 0x3035),
        0x3037,
        (0x303B, 0x303F),
        (0x3041, 0x3096),
        (0x3099, 0x309A),
        (0x309D, 0x309E),
        (0x30A0, 0x30FE),
        (0x3400, 0x4DBF),
        (0x4E00, 0x9FFF),
        (0xAC00, 0xD7A3),
        (0xE000, 0xF8FF),
        0xFFFD,
        (0x1F000, 0x1F02B),
        (0x1F030, 0x1F093),
        (0x1F0A0, 0x1F0AE),
        (0x1F0B1, 0x1F0BF),
        (0x1F0C1, 0x1F0CF),
        (0x1F0D1, 0x1F0F5),
        (0x1F10B, 0x1F10F),
        0x1F12F,
        (0x1F150, 0x1F169),
        (0x1F16D, 0x1F18F),
        (0x1F191, 0x1F1AD),
        (0x1F1E6, 0x1F1FF),
        (0x1F260, 0x1F265),
        (0x1F300, 0x1F6D7),
        (0x1F6DD, 0x1F6EC),
        (0x1F6F0, 0x1F6FC),
        (0x1F700, 0x1F773),
        (0x1F780, 0x1F7D8),
        (0x1F7E0, 0x1F7EB),
        0x1F7F0,
        (0x1F800, 0x1F80B),
        (0x1F810, 0x1F847),
        (0x1F850, 0x1F859),
        (0x1F860, 0x1F887),
        (0x1F890, 0x1F8AD),
        (0x1F8B0, 0x1F8B1),
        (0x1F900, 0x1FA53),
        (0x1FA60, 0x1FA6D),
        (0x1FA70, 0x1FA74),
        (0x1FA78, 0x1FA7C),
        (0x1FA80, 0x1FA86),
        (0x1FA90, 0x1FAAC),
        (0x1FAB0, 0x1FABA),
        (0x1FAC0, 0x1FAC5),
        (0x1FAD0, 0x1FAD9),
        (0x1FAE0, 0x1FAE7),
        (0x1FAF0, 0x1FAF6),
    )
)
_DROPPED = re.compile(f"[{DROPPED_CHARACTERS}]")
_MAYBE_CHANGED = re.compile(f"[^\\x00-\\x7f{STABLE_CHARACTERS}]")


class _View:
    """The text as the rules read it (:attr:`text`), and the way back to the original's offsets.

    Only characters whose normal form is not one character long (a dropped one; ``…`` read as
    ``...``) move offsets; they are kept as (view start, view end, original start, original end).
    """

    __slots__ = ("_o_ends", "_o_starts", "_v_ends", "_v_starts", "text")

    def __init__(self, original: str) -> None:
        self.text = original
        self._v_starts: list[int] = []
        self._v_ends: list[int] = []
        self._o_starts: list[int] = []
        self._o_ends: list[int] = []
        if original.isascii():
            return
        normal_forms = {}
        for char in set(_MAYBE_CHANGED.findall(original)):
            normal = "" if _DROPPED.match(char) else unicodedata.normalize("NFKC", char)
            if normal != char:
                normal_forms[char] = normal
        if not normal_forms:
            return
        if all(len(normal) == 1 for normal in normal_forms.values()):  # offsets stay
            view = original
            for char, normal in normal_forms.items():
                view = view.replace(char, normal)
            self.text = view
            return
        pieces: list[str] = []
        done = 0  # the original is copied up to here
        shift = 0  # view offset minus original offset, after ``done``
        for match in _MAYBE_CHANGED.finditer(original):
            char = match.group()
            normal = normal_forms.get(char, char)
            if normal == char:
                continue
            at = match.start()
            pieces.append(original[done:at])
            pieces.append(normal)
            done = at + 1
            if len(normal) != 1:
                self._v_starts.append(at + shift)
                self._v_ends.append(at + shift + len(normal))
                self._o_starts.append(at)
                self._o_ends.append(at + 1)
                shift += len(normal) - 1
        if pieces:
            pieces.append(original[done:])
            self.text = "".join(pieces)

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """The original's offsets of the view's ``[start, end)``; an end inside a character's
        expansion takes the whole character."""
        if not self._v_ends:
            return start, end
        return self._to_original(start, True), self._to_original(end, False)

    def _to_original(self, at: int, is_start: bool) -> int:
        k = bisect.bisect_right(self._v_ends, at)
        if k < len(self._v_ends) and self._v_starts[k] < at:  # inside an expansion
            return self._o_starts[k] if is_start else self._o_ends[k]
        return at + (self._o_ends[k - 1] - self._v_ends[k - 1] if k else 0)


# --------------------------------------------------------------------------- judging a value

# A value that is no secret starts like a reference (``$VAR``, ``${...}``, ``%s``, ``%VAR%``,
# ``!Ref x``, ``&anchor``), a template or markup (``{``, ``<``, ``(``, ``[``), a comment, an ellipsis,
# a string with a prefix (``f"..."``), or a lookup of the environment. A password may start with
# ``!``, ``#``, ``*``, ``@`` or ``%`` too, so those count only in these shapes.
_REFERENCE_START = re.compile(
    r"""\$(?:[A-Za-z0-9_{(@*#?!-]|$)|%[sd(]|%[A-Za-z_]+%|[{<(\[`\\]|![A-Za-z]+(?:\s|$)|&[A-Za-z_]\w*$|\*\*"""
    r"""|#(?:\s|$|\{)|\|(?:\s|$|-)|~/|\.\.\.|…|//|/\*|[frbu]{1,2}["'`]|\?\?"""
    r"""|(?:process\.env|os\.(?:environ|getenv)|import\.meta|deno\.env|env\(|getenv|secrets\.|vars\.)""",
    re.IGNORECASE,
)
# An expression of code: a dotted name, a call, an index (``settings.API_KEY``, ``getpass()``,
# ``config["key"]``, ``user?.token``).
_CODE_EXPRESSION = re.compile(
    r"[A-Za-z_$][\w$]*(?:(?:\?\.|\.|::|->)[A-Za-z_$][\w$]*)*(?:\(|\[|(?:\?\.|\.|::|->)[A-Za-z_$])"
)
_EXPRESSION_PARTS = re.compile(r"[.(\[\]?:>-]+")
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
_CAMEL = re.compile(r"[a-z][A-Z]")
_STAND_INS = frozenset(
    """
    str string string? text bytes int integer number float bool boolean any object none null nil
    undefined true false yes no on off required optional empty hidden masked unset set missing
    invalid incorrect wrong expired revoked changed updated reset secret secretstr password passwd
    pass pwd token key apikey credentials credential example placeholder sample dummy todo tbd n/a
    na varchar char uuid
    """.split()
)
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_STAND_IN_STARTS = (
    "your_",
    "your-",
    "your ",
    "yourapi",
    "yourkey",
    "yoursecret",
    "yourtoken",
    "yourpass",
    "my_",
    "my-",
    "example",
    "placeholder",
    "replace",
    "insert",
    "enter",
    "xxx",
)


def _is_placeholder(value: str) -> bool:
    """A reference, a template, a type, a stand-in: a value that is no secret."""
    if not value:
        return True
    if _REFERENCE_START.match(value):
        return True
    folded = value.casefold()
    if "redacted" in folded or "***" in folded or "…" in folded:
        return True
    core = folded.strip(".,;:)]}>'\"` ")
    if not core or core in _STAND_INS or core.startswith(_STAND_IN_STARTS):
        return True
    if _ENV_NAME.fullmatch(value.strip("`'\" ")):
        return True  # the name of a variable: ``Password: `DB_PASSWORD` ``
    return set(core) <= set("x*.-_•·#?0")


def _is_code(value: str, code_key: bool) -> bool:
    """An expression of code (``hashedPassword,``, ``user.password``, ``getpass()``), unless a
    part of it looks random (``hvs.CAESIj...``). After a ``code_key`` (not UPPER_CASE, not
    ``=``), a name followed by ``,``/``;``/``)`` is a variable too."""
    head = value.split(None, 1)[0] if value.strip() else value
    if _CODE_EXPRESSION.match(head):
        return not any(_looks_random(part, 12) for part in _EXPRESSION_PARTS.split(head))
    name = head.rstrip(",;)")
    if _IDENTIFIER.fullmatch(name) and not any(c.isdigit() for c in name):
        if code_key and head != name:
            return True
        if name[0].islower() and _CAMEL.search(name):
            return True  # lowerCamelCase: a variable's name
    return False


def _looks_random(value: str, minimum: int = 16) -> bool:
    """A machine-made token: long, no spaces, and its letters and digits switch class often (a
    sha256, base64), with digits in it or, without, more switches (random mixed case), unlike
    names (``user_profile_cache``, ``dataBindingMergeDependencyArtifactsDebug``, ``MyApp2``)."""
    if len(value) < minimum:
        return False
    value = value[:256]
    switches = counted = digits = 0
    last = ""
    for char in value:
        if char.isdigit():
            kind = "d"
            digits += 1
        elif char.isupper():
            kind = "u"
        elif char.islower():
            kind = "l"
        elif char.isspace():
            return False
        else:
            continue
        counted += 1
        if kind != last and last:
            switches += 1
        last = kind
    if counted < minimum * 3 // 4:
        return False
    if digits:
        return digits < counted and switches * 4 >= counted
    return switches * 5 >= counted * 2


_WORD_PIECE = re.compile(r"(?<![A-Za-z0-9])(?:[a-z]{3,}|[A-Z][a-z]{2,}|[A-Z]{3,})(?![A-Za-z0-9])")


def _random_value(value: str) -> bool:
    """:func:`_looks_random`, and not a name built of words around a hash
    (``node-cache-Linux-x64-npm-<sha>``); or base64 of ``user:password``."""
    if _looks_random(value):
        return len(_WORD_PIECE.findall(value)) < 2
    return _basic_credentials(value)


def _basic_credentials(token: str) -> bool:
    """``token`` is base64 of ``user:password`` (HTTP Basic, docker's ``auth``)."""
    if len(token) < 8:
        return False
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    user, colon, password = decoded.partition(":")
    return bool(colon and user and password) and decoded.isprintable()


def _token_like(value: str) -> bool:
    """A token, not a word: eight ASCII characters or more, not only letters, no spaces, no URL."""
    return (
        len(value) >= 8
        and value.isascii()
        and not value.replace("_", "").replace("-", "").isalpha()
        and " " not in value
        and "://" not in value
    )


def _is_prose(value: str) -> bool:
    """Words, not a password: six or more, bold words (``**Save this password!**``), or words in a
    script people write sentences in (a password in Cyrillic or Han is rare; ``Client Secret:
    已填写(从 Google Console 获取)`` is common)."""
    words = len(value.split())
    if words >= 6 or (words >= 2 and value.endswith(("**", "__"))):
        return True
    return not value.isascii() and sum(1 for c in value if c.isalpha() and not c.isascii()) >= 3


# --------------------------------------------------------------------------- provider prefixes

#: Used when Hermes's list cannot be imported: its common prefixes, same patterns (a test checks
#: both redact the corpus alike).
FALLBACK_PREFIX_PATTERNS = (
    r"sk-[A-Za-z0-9_-]{10,}",
    r"ghp_[A-Za-z0-9]{10,}",
    r"github_pat_[A-Za-z0-9_]{10,}",
    r"gho_[A-Za-z0-9]{10,}",
    r"ghu_[A-Za-z0-9]{10,}",
    r"ghs_[A-Za-z0-9]{10,}",
    r"ghr_[A-Za-z0-9]{10,}",
    r"xapp-\d+-[A-Za-z0-9-]{10,}",
    r"xox[baprs]-[A-Za-z0-9-]{10,}",
    r"AIza[A-Za-z0-9_-]{30,}",
    r"AKIA[A-Z0-9]{16}",
    r"sk_live_[A-Za-z0-9]{10,}",
    r"sk_test_[A-Za-z0-9]{10,}",
    r"rk_live_[A-Za-z0-9]{10,}",
    r"SG\.[A-Za-z0-9_-]{10,}",
    r"hf_[A-Za-z0-9]{10,}",
    r"npm_[A-Za-z0-9]{10,}",
    r"pypi-[A-Za-z0-9_-]{10,}",
    r"dop_v1_[A-Za-z0-9]{10,}",
    r"gsk_[A-Za-z0-9]{10,}",
    r"sk_[A-Za-z0-9_]{10,}",
)
#: Shapes Hermes's list lacks, used with either list: GitLab tokens, AWS temporary key ids.
EXTRA_PREFIX_PATTERNS = (
    r"glpat-[A-Za-z0-9_-]{16,}",
    r"ASIA[A-Z0-9]{16}",
    # Neither Hermes's list nor gitleaks' rules have these bare: Stripe webhook signing secrets,
    # New Relic user API keys without their label.
    r"whsec_[A-Za-z0-9]{24,}",
    r"NRAK-[A-Z0-9]{27}",
)
_REGEX_META = "[(\\.?*+|{^$"


def _literal_prefix(pattern: str) -> str:
    """The characters every match of ``pattern`` starts with (``SG\\.`` gives ``SG.``)."""
    prefix = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            prefix.append(pattern[i + 1])
            i += 2
            continue
        if char in _REGEX_META:
            break
        prefix.append(char)
        i += 1
    return "".join(prefix)


@functools.cache
def hermes_prefix_patterns() -> tuple[str, ...] | None:
    """Hermes's maintained prefix patterns (``agent.redact._PREFIX_PATTERNS``), or None outside
    Hermes or if they do not compile. Only the list is read: Hermes's redactor and its
    ``HERMES_REDACT_SECRETS`` switch play no part here."""
    try:
        from agent.redact import _PREFIX_PATTERNS  # at first use: importing this module stays cheap

        patterns = tuple(str(p) for p in _PREFIX_PATTERNS)
        re.compile("|".join(patterns))
    except Exception:
        return None
    return patterns or None


def prefix_patterns(use_hermes: bool = True) -> tuple[str, ...]:
    """The prefix list in use: Hermes's when importable (and ``use_hermes``), else the fallback."""
    return (hermes_prefix_patterns() if use_hermes else None) or FALLBACK_PREFIX_PATTERNS


@functools.cache
def _prefix_regex(patterns: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...], re.Pattern[str]]:
    """For ``patterns`` and the extras: the literal prefixes made of token characters (looked for
    at the start of long runs), the others (``SG.``, looked for anywhere), both longest first, and
    one regex."""
    everything = patterns + EXTRA_PREFIX_PATTERNS
    literals = sorted({_literal_prefix(p) for p in everything} - {""}, key=len, reverse=True)
    plain = tuple(lit for lit in literals if set(lit) <= _TOKEN_CHARS) + _NOT_PREFIXES
    dotted = tuple(lit for lit in literals if not set(lit) <= _TOKEN_CHARS)
    regex = re.compile(
        "(?:" + "|".join(f"(?:{p})" for p in everything) + r")(?:\.[A-Za-z0-9_-]{4,})*(?![A-Za-z0-9_-])"
    )
    return plain, dotted, regex


@functools.cache
def _prefix_heads(patterns: tuple[str, ...]) -> tuple[int, frozenset[str]]:
    """The first characters (as many as the shortest has) of the literal prefixes looked for at the
    start of runs: a run whose start is not one of them starts with none (one set lookup a run, not
    a comparison with each of forty prefixes)."""
    plain = _prefix_regex(patterns)[0]
    size = min(len(literal) for literal in plain)
    return size, frozenset(literal[:size] for literal in plain)


# --------------------------------------------------------------------------- rules

Spans = list[tuple[int, int]]
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_WORDS_JOINED = re.compile(r"[a-z]{2,}(?:[_-][a-z]{2,})+")
# Runs the token rule wants found with the prefixes: JWTs, AWS key ids.
_NOT_PREFIXES = ("eyJ", "AKIA", "ASIA")


class _Runs(NamedTuple):
    """What one pass over a text's maximal runs of ``[A-Za-z0-9_-]`` (twelve characters or more)
    finds, for the rules that read tokens."""

    starts: list[int]  # where the runs that start with a token prefix (a provider's, eyJ, AKIA) start
    mixed: int  # how many others are twenty characters or more of mixed case and digits (base64),
    # counted up to two (the armor rule asks for two)
    longest: int  # the longest run's length (0 when none is twelve long): a secret needs one so long
    glued: list[str]  # the runs (lowered) whose first two letters start one of gitleaks' keywords


class _Scan:
    """One text's view, lowered view, prefix list, and what more than one rule reads (the long runs
    of token characters; the label matches), each found once."""

    __slots__ = ("_joined", "_labels", "_runs", "_words", "low", "patterns", "view")
    _runs: _Runs | None

    def __init__(self, view: str, patterns: tuple[str, ...]) -> None:
        self.view = view
        low = view.lower()
        if len(low) != len(view):  # "İ" lowers to two characters: keep offsets
            low = "".join(c.lower() if len(c.lower()) == 1 else c for c in view)
        self.low = low
        self.patterns = patterns
        self._runs = None
        self._labels: list[tuple[str, str, int, int]] | None = None
        self._words: frozenset[bytes] | None = None
        self._joined: bytes | None = None

    def words(self) -> frozenset[bytes]:
        """The lowered text's words: maximal runs of ASCII letters and digits (split in C)."""
        if self._words is None:
            self._words = frozenset(_split_words(self.low))
        return self._words

    def long(self) -> bool:
        """Long enough that its words are worth a set: a short text is looked through faster."""
        return len(self.low) >= _JOINED_WORDS_FROM

    def has(self, cue: str) -> bool:
        """``cue in self.low``. A cue of lower-case letters and digits lies inside one word, so in a
        long text it is looked for in the distinct words joined by spaces (a third of the text): one
        split serves every such cue."""
        if not (self.long() and cue.isascii() and cue.isalnum() and cue.islower()):
            return cue in self.low
        if self._joined is None:
            self._joined = b" ".join(self.words())
        return cue.encode("ascii") in self._joined

    def runs(self) -> _Runs:
        """The text's long runs of token characters (:class:`_Runs`), read once."""
        if self._runs is None:
            starts: list[int] = []
            glued_runs: list[str] = []
            mixed = longest = 0
            literals = _prefix_regex(self.patterns)[0]
            head, heads = _prefix_heads(self.patterns)
            leaks = gitleaks_rules()
            glued = leaks.glued if leaks else {}
            first = _RUN_AT_START.match(self.view)
            for run in itertools.chain((first,) if first else (), _RUN.finditer(self.view)):
                text = run.group(1)
                size = len(text)
                if size > longest:
                    longest = size
                if text[:head] in heads and text.startswith(literals):
                    starts.append(run.start(1))
                elif mixed < 2 and size >= 20 and _mixed(text):
                    mixed += 1
                if text[:2].lower() in glued:
                    glued_runs.append(text.lower())
            self._runs = _Runs(starts, mixed, longest, glued_runs)
        return self._runs

    def labels(self) -> list[tuple[str, str, int, int]]:
        """(key, separator, where the value starts, where the key starts) for every label word
        followed by a separator."""
        if self._labels is None:
            self._labels = []
            view = self.view
            cjk = any(char in self.low for char in _LABEL_CJK_STARTS)
            for match in (_LABEL if cjk else _LABEL_LATIN).finditer(self.low):
                start = match.start()
                while start > 0 and view[start - 1] in _KEY_CHARS and match.start() - start < 64:
                    start -= 1
                key = view[start : match.start("close")]
                self._labels.append((key, match.group("sep").strip(), match.end(), start))
        return self._labels


# A maximal run of token characters, twelve or more, found from the character before it (one at the
# text's start is matched on its own): the search then tries a match at each character that is no
# token's, not at each of a word's (a fifth less time than ``[A-Za-z0-9_-]{12,}``, the same runs).
_RUN = re.compile(r"[^A-Za-z0-9_-]([A-Za-z0-9_-]{12,})")
_RUN_AT_START = re.compile(r"([A-Za-z0-9_-]{12,})")
_JOINED_WORDS_FROM = 2048  # characters: from this length cues are looked for in the joined words

_ARMOR_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}(?:PRIVATE|SECRET|ENCRYPTED)[A-Z0-9 ]{0,40}-----")
_ARMOR_END = re.compile(r"-----END [A-Z0-9 ]{0,40}(?:PRIVATE|SECRET|ENCRYPTED)[A-Z0-9 ]{0,40}-----")
# Base64 lines, ended by a newline or by ``\n`` written out in a JSON string. A run starts at a
# line's start or just after a written-out ``\n`` (never at its ``n``).
_B64_LINE = r"[ \t]*[A-Za-z0-9+/]{16,}={0,2}[ \t]*"
_B64_START = r"(?:(?<=\\n)|(?<![\\A-Za-z0-9+/=]))"
# Lines above an END, on the reversed text: a line break (``\n``, ``\r\n`` or a written-out
# ``\n``, reversed) then a whole line of base64.
_B64_ABOVE_END_REVERSED = re.compile(r"(?:(?:\n\r?|n\\)[ \t]*[A-Za-z0-9+/=]{4,}[ \t]*(?=\n|n\\|\Z))+")
_B64_LINES = rf"(?m)^(?:{_B64_LINE}\r?\n){{1,4096}}{_B64_LINE}$"
_B64_RUN = re.compile(rf"{_B64_LINES}|{_B64_START}(?:[A-Za-z0-9+/]{{40,}}={{0,2}}\\n){{2,4096}}")
# The first branch alone, for a text in which the second cannot match: it finds the same runs,
# and without the second's lookbehinds tried at every position it costs a sixth as much.
_B64_LINES_RUN = re.compile(_B64_LINES)
# What the second branch needs somewhere, on the reversed text: forty base64 characters before a
# written-out ``\n`` (reversed, the search starts with a literal: fast).
_B64_ESCAPED_LINE_REVERSED = re.compile(r"n\\={0,2}[A-Za-z0-9+/]{40}")
_B64_KEY_LINE = re.compile(r"[A-Za-z0-9+/]{40,}")


def _add_stripped(view: str, start: int, end: int, spans: Spans) -> None:
    """``[start, end)`` less the blank space and written-out ``\\n`` at either end."""
    while start < end and view[start] in " \t\r\n":
        start += 1
    if view.startswith("\\n", start):
        start += 2
    while end > start and view[end - 1] in " \t\r\n":
        end -= 1
    if view.endswith("\\n", start, end):
        end -= 2
    if end > start:
        spans.append((start, end))


_PUBLIC_KEY_TYPES = ("ssh-rsa ", "ssh-ed25519 ", "ssh-dss ", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-")


def _b64_text(lines: list[str]) -> bool:
    """True when base64 lines decode to text (an encoded document), not to a key's bytes."""
    joined = "".join(lines)[:1028]
    for offset in range(4):  # the run may start anywhere in the encoded stream
        data = joined[offset:]
        try:
            decoded = base64.b64decode(data[: len(data) // 4 * 4]).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            continue
        if sum((c.isprintable() or c.isspace()) and c != "\ufffd" for c in decoded) >= 0.9 * len(decoded):
            return True
    return False


def _mixed(run: str) -> bool:
    """Letters of both cases and digits (a base64 line's piece), by ``str`` methods (fast)."""
    return not (run.isalpha() or run.isdigit() or run.islower() or run.isupper())


def _armor(scan: _Scan, spans: Spans) -> None:
    view = scan.view
    if "-----" in view:
        done = 0
        for begin in _ARMOR_BEGIN.finditer(view):
            if begin.start() >= done:
                end = _ARMOR_END.search(view, begin.end())
                _add_stripped(view, begin.end(), end.start() if end else len(view), spans)
                done = end.end() if end else len(view)
        # An END with no BEGIN above it (a chunk cut the key): the base64 lines just above it, read
        # backwards (matched on the reversed text, so each END costs the length of its lines).
        previous = 0
        for end in _ARMOR_END.finditer(view):
            above = view[max(previous, end.start() - 16384) : end.start()][::-1]
            run = _B64_ABOVE_END_REVERSED.match(above)
            if run:
                _add_stripped(view, end.start() - run.end(), end.start(), spans)
            previous = end.end()
    # No armour at all (the middle chunk of a long key): two lines or more of random base64. Looked
    # for only where two long runs of mixed letters and digits are.
    if "\n" in view and scan.runs().mixed >= 2:
        escaped = "\\n" in view and _B64_ESCAPED_LINE_REVERSED.search(view[::-1])
        for run in (_B64_RUN if escaped else _B64_LINES_RUN).finditer(view):
            lines = _B64_KEY_LINE.findall(run.group())
            line_before = view[view.rfind("\n", 0, max(0, run.start() - 1)) + 1 : run.start()]
            if any(key_type in line_before for key_type in _PUBLIC_KEY_TYPES):
                continue  # an OpenSSH public key wrapped over lines
            armored = view.rfind("-----BEGIN ", max(0, run.start() - 512), run.start())
            if armored >= 0 and "-----END " not in view[armored : run.start()]:
                continue  # inside a certificate's or a public key's armour (private ones are done)
            if sum(1 for line in lines if _looks_random(line, 40)) >= 2 and not _b64_text(lines):
                _add_stripped(view, run.start(), run.end(), spans)


_NEXT_LINE_TOKEN = re.compile(r"\r?\n[ \t]*([A-Za-z0-9_+/=-]{8,512})[ \t]*(?:\r?\n|\Z)")


def _continued(view: str, end: int) -> int:
    """``end``, or the end of the next line when that line is nothing but a random token: the rest
    of a key that a terminal or an editor wrapped there."""
    if view.startswith("\n", end) or view.startswith("\r\n", end):
        more = _NEXT_LINE_TOKEN.match(view, end)
        if more and _looks_random(more.group(1), 8):
            return more.end(1)
    return end


def _prefix(scan: _Scan, spans: Spans) -> None:
    """Provider tokens: each long run that starts with a known prefix, and each occurrence of a
    prefix that holds a character runs do not (``SG.``)."""
    view = scan.view
    literals, dotted, regex = _prefix_regex(scan.patterns)
    starts = list(scan.runs().starts)
    for literal in dotted:
        at = view.find(literal)
        while at >= 0:
            if at == 0 or view[at - 1] not in _TOKEN_CHARS:
                starts.append(at)
            at = view.find(literal, at + 1)
    for at in starts:
        match = regex.match(view, at)
        if match:
            token = match.group()
            literal = next((lit for lit in literals + dotted if token.startswith(lit)), "")
            body = token[len(literal) :]
            # ``sk_learn_pipeline``, ``sk-your-key-here``, ``sk-proj-REDACTED``: a name or a stand-in.
            if not (_WORDS_JOINED.fullmatch(body) or _is_placeholder(body) or _is_placeholder(token)):
                spans.append((at, _continued(view, match.end())))


_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]+)?")
_WEBHOOK = re.compile(
    r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/-]{8,512})"
    r"|discord(?:app)?\.com/api/webhooks/\d{1,30}/([A-Za-z0-9_-]{8,512})"
)
_TELEGRAM = re.compile(r"\d{8,12}:(AA[A-Za-z0-9_-]{28,62})(?![A-Za-z0-9_-])")
_AWS_SECRET = re.compile(r"[A-Za-z0-9/+=]{40,}+")


def _token(scan: _Scan, spans: Spans) -> None:
    view = scan.view
    aws_id = False
    for at in scan.runs().starts:
        if view.startswith("eyJ", at):
            jwt = _JWT.match(view, at)
            if jwt:
                spans.append(jwt.span())
        elif view.startswith(("AKIA", "ASIA"), at):
            aws_id = True
    if scan.has("hooks"):
        for match in _WEBHOOK.finditer(view):
            spans.append(match.span(1 if match.group(1) else 2))
    if ":AA" in view:  # a bot token's secret half starts with "AA"
        for match in _TELEGRAM.finditer(view):
            if _looks_random(match.group(1)) and not view[match.start() - 1 : match.start()].isdigit():
                spans.append(match.span(1))
    if aws_id or (scan.has("aws") and scan.has("secret")):
        for match in _AWS_SECRET.finditer(view):
            token = match.group()
            if (
                len(token) == 40
                and token[0] != "/"
                and token.count("/") <= 3
                and "=" not in token
                and _looks_random(token)
                and _mixed(token)
            ):
                spans.append(match.span())


# URLs: the authority after "://", split at its last "@"; on the lowered view, query parameters.
_URL_AUTHORITY = re.compile(r"[^\s/?#\"'<>\\`]{1,512}")
_QUERY_SECRET = re.compile(
    r"[?&;](?:key|sig|signature|code|auth|session|sessionid|sid|x-amz-signature|x-goog-signature"
    r"|x-amz-security-token|access_token|refresh_token|id_token|client_secret)=([^&#\s\"'<>`]{1,2048})"
)


def _url(scan: _Scan, spans: Spans) -> None:
    view = scan.view
    found = view.find("://") if "@" in view else -1
    while found >= 0:
        start = found + 3
        found = view.find("://", start)
        match = _URL_AUTHORITY.match(view, start)
        if match:
            authority = match.group()
            at = authority.rfind("@")
            if at <= 0:
                continue
            userinfo = authority[:at]
            user, colon, password = userinfo.partition(":")
            if colon:
                if not _is_placeholder(password):
                    spans.append((start + len(user) + 1, start + at))
            elif _random_value(userinfo):
                spans.append((start, start + at))
    if "=" in view and ("?" in view or "&" in view):
        for match in _QUERY_SECRET.finditer(scan.low):
            value = unquote(view[match.start(1) : match.end(1)])
            if _looks_random(value, 12) or _basic_credentials(value):
                spans.append(match.span(1))


_AUTH_SCHEME = re.compile(
    r"(?i)[ \t]*(?P<q>[\"'`]?)[ \t]*(?:(?P<scheme>basic|bearer|token|digest|negotiate|ntlm|apikey|api-key"
    r"|key|sso-key|hmac|jwt|aws4-hmac-sha256|otp|splunk|gitlab-token)[ \t]+)?"
)
_HEADER_VALUE = re.compile(r"[^\s\"'`,;]{1,4096}")
# On the lowered view (the token's case is read from the view).
_BARE_SCHEME = re.compile(r"(bearer|basic)[ \t]+([a-z0-9._~+/-]{12,4096}={0,2})(?![a-z0-9._~+/=-])")
_COOKIE_VALUES = re.compile(r"[^\n]{1,4096}")
_COOKIE_PAIR = re.compile(r"([^\s=;,]{1,128})=([^\s;,\"']{1,4096})")


def _header(scan: _Scan, spans: Spans) -> None:
    view, low = scan.view, scan.low
    done = 0
    for key, sep, at, start in scan.labels():
        name = key.lower()
        if start < done:
            continue
        if name.endswith("authorization") and sep in (":", "="):
            _authorization(view, at, spans)
        elif name.endswith("cookie") and sep == ":":
            values = _COOKIE_VALUES.match(view, at)
            done = values.end() if values else at
            for pair in _COOKIE_PAIR.finditer(values.group() if values else ""):
                name, value = pair.group(1).lower(), pair.group(2)
                named = any(word in name for word in ("session", "token", "auth", "sid", "jwt"))
                if _looks_random(value) or (named and _token_like(value) and not _is_placeholder(value)):
                    spans.append((at + pair.start(2), at + pair.end(2)))
    if scan.has("bearer") or scan.has("basic"):
        for match in _BARE_SCHEME.finditer(low):
            if match.start() and low[match.start() - 1].isalnum():
                continue
            token = view[match.start(2) : match.end(2)]
            if match.group(1) == "basic":
                found = _basic_credentials(token) or _looks_random(token)
            else:
                found = _looks_random(token) or (token.count(".") == 2 and len(token) >= 24)
            if found:
                spans.append(match.span(2))


def _authorization(view: str, at: int, spans: Spans) -> None:
    """The credential of an ``Authorization:`` header whose value starts at ``at``."""
    head = _AUTH_SCHEME.match(view, at)
    assert head is not None  # every part of the pattern is optional: it matches at any position
    start = head.end()
    scheme = (head.group("scheme") or "").lower()
    if scheme == "digest":  # parameters: to the closing quote or the end of the line
        end = view.find(head.group("q") or "\n", start)
        value = view[start : min(end if end >= 0 else len(view), start + 4096)].rstrip()
        if value and not _is_placeholder(value):
            spans.append((start, start + len(value)))
        return
    token = _HEADER_VALUE.match(view, start)
    if not token:
        return
    value = token.group()
    if _is_placeholder(value) or value.replace("_", "").replace("-", "").isalpha() or _is_code(value, True):
        return  # ``Bearer YOUR_TOKEN``, ``Bearer полученный_токен``, ``Bearer token.value``
    if scheme or _token_like(value):
        spans.append((start, _continued(view, token.end())))


# ``--password value`` (``--password=value`` is a labelled value): a flag that names a secret, then
# a word that is not another flag. On the lowered view, like the command lines below (values are
# read from the view).
_FLAG = re.compile(
    r"--?(?:[a-z0-9]{1,20}-){0,3}(?:password|passwd|pass|pwd|token|secret|api-?key|apikey|access-key"
    r"|secret-key|private-key|auth-token|access-token|client-secret)[ \t]+"
    r"(?P<q>[\"']?)(?P<v>[^\s\"'-][^\s\"']{0,255})(?P=q)"
)
# ~/.netrc: ``machine <host> [login <user>] password <secret>``, over one line or several.
_NETRC = re.compile(
    r"machine[ \t]+\S{1,256}(?:\s{1,64}(?:login|account|port)[ \t]+\S{1,256}){0,3}\s{1,64}"
    r"password[ \t]+(?P<v>\S{1,256})"
)
# Command lines whose password follows a short flag, each with the literal it needs.
_COMMANDS = (
    (
        ("mysql", "mariadb"),
        re.compile(
            r"(?:mysql|mariadb)[a-z-]{0,8}(?![a-z0-9_.-])[^\n|;&]{0,200}?[ \t]-p(?P<v>[^\s-][^\s]{0,255})"
        ),
    ),
    (
        ("login",),
        re.compile(
            r"(?:docker|podman|nerdctl|buildah|skopeo|helm|oras)[ \t]+(?:registry[ \t]+)?login"
            r"[^\n|;&]{0,200}?[ \t]-p[ \t]+(?P<v>[^\s]{1,256})"
        ),
    ),
    (("sshpass",), re.compile(r"sshpass[ \t]+-p[ \t]*(?P<v>[^\s]{1,256})")),
    (("redis-cli",), re.compile(r"redis-cli[^\n|;&]{0,200}?[ \t]-a[ \t]+(?P<v>[^\s]{1,256})")),
    # OpenLDAP's tools take the bind password after -w.
    (
        ("ldap",),
        re.compile(r"ldap[a-z]{2,12}(?![a-z0-9_.-])[^\n|;&]{0,300}?[ \t]-w[ \t]*(?P<v>[^\s-][^\s]{0,255})"),
    ),
    # htpasswd -b[c...] FILE USER PASSWORD: the password is the third word after the flags.
    (
        ("htpasswd",),
        re.compile(
            r"htpasswd(?:[ \t]+-[a-z]+)*?[ \t]+-[a-z]*b[a-z]*(?:[ \t]+-[a-z]+)*"
            r"[ \t]+[^\s-]\S{0,255}[ \t]+[^\s-]\S{0,127}[ \t]+(?P<v>[^\s]{1,256})"
        ),
    ),
    (
        ("curl", "wget"),
        re.compile(
            r"(?:curl|wget)[^\n|;&]{0,300}?[ \t](?:-u|--user|--proxy-user)[ \t]*=?"
            r"[\"']?[^\s:\"']{0,128}:(?P<v>[^\s\"']{1,256})"
        ),
    ),
)
#: Command lines and config files whose secret follows no flag.
_NO_FLAG_COMMANDS = (
    # NetworkManager: ``nmcli ... password <p>``, ``wifi-sec.psk <p>``, ``802-1x.password <p>``.
    (
        ("nmcli",),
        re.compile(
            r"nmcli[^\n|;&]{0,300}?[ \t](?:password|wifi-sec\.psk|802-1x\.password)[ \t]+(?P<v>[^\s]{1,256})"
        ),
    ),
    # NuGet.config: <add key="ClearTextPassword" value="..." />.
    (
        ("cleartextpassword",),
        re.compile(r"cleartextpassword[\"'][ \t]+value[ \t]*=[ \t]*[\"'](?P<v>[^\"'\n]{1,256})[\"']"),
    ),
)
#: Redis's ``AUTH [user] password`` at its prompt (``redis> AUTH ...``) or on a redis-cli
#: line: upper-case, and the end of its line after it.
_REDIS_AUTH = re.compile(
    r"(?m)(?:>|redis-cli[^\n|;&]{0,200}?[ \t])[ \t]*AUTH[ \t]+(?:\S{1,64}[ \t]+)?(?P<v>\S{4,256})[ \t]*$"
)
#: A secret named without ``=`` or ``:``: ``client_secret 3f9a...``, ``deploy token gldt-...``;
#: only a value that looks like a token (:func:`_token_like`) counts.
_NAMED_VALUE = re.compile(r"[ \t]+(?P<v>[a-z0-9][a-z0-9_\-.+/=]{15,255})(?![a-z0-9_\-.+/=])")
# The words before a ``secret``/``key``/``token`` found by ``str.find`` (a regex scanning for the
# whole cue costs ten times as much on a long text), ending where that word starts.
_NAMED_TOKEN_HEAD = re.compile(r"(?:client|secret|api|access|auth|deploy|bearer)[_ -]?\Z")
_NAMED_TOKEN_HEADS = frozenset((b"client", b"secret", b"api", b"access", b"auth", b"deploy", b"bearer"))
# Each tail, and the words it makes joined to a head (``apikey``, ``clientsecret``).
_NAMED_TOKEN_TAILS = tuple(
    (tail, frozenset(head + tail.encode() for head in _NAMED_TOKEN_HEADS))
    for tail in ("secret", "key", "token")
)
#: A JSON Web Key's private members (RFC 7518 section 6: an EC or OKP key's ``d``, an RSA key's
#: ``d``/``p``/``q``/``dp``/``dq``/``qi``, a symmetric key's ``k``), in a text that says ``"kty"``.
_JWK_PRIVATE = re.compile(
    r"[\"'](?:d|p|q|dp|dq|qi|k)[\"'][ \t]*:[ \t]*(?P<v>[\"'][A-Za-z0-9_-]{16,4096}={0,2}[\"'])"
)
#: A raw key in hex (an ed25519 seed is 64 hex digits, its expanded key 128) after a label that
#: says seed or private/secret key: ``ed25519 seed: 9d61...``, ``private key (hex) = "..."``. A
#: digest (``sha256:<hex>``) stays, and so do git's 40-digit ids (too short).
_HEX_SEED = re.compile(
    r"(?:seed|priv(?:ate)?[ _-]?key|secret[ _-]?key|signing[ _-]?key)"
    r"(?:[ \t]*\([a-z0-9 ]{1,16}\))?[\"'`]{0,3}[ \t]*(?::=|[=:]|is|[ \t])[ \t]*[\"'`]?(?:0x)?"
    r"(?P<v>[0-9a-f]{64}(?:[0-9a-f]{64})?)(?![0-9a-z])"
)
#: A line of ~/.pgpass, ``host:port:database:user:password``, where the text names the file.
_PGPASS = re.compile(
    r"(?m)^[ \t]*[a-z0-9*][a-z0-9.*_-]{0,252}:(?:[0-9]{1,5}|\*)"
    r":[^\s:]{1,63}:[^\s:]{1,63}:(?P<v>[^\s]{1,256})[ \t]*$"
)
_OPENSSL = re.compile(r"-pass(?:in|out)?[ \t]+pass:(?P<v>[^\s]{1,256})")
_AUTH_TUPLE = re.compile(
    r"[ \t]*(?:[a-z_.]{0,40}auth)?\([ \t]*(?P<a>[\"'])[^\"'\n]{0,128}(?P=a)[ \t]*,[ \t]*"
    r"(?P<b>[\"'])(?P<v>[^\"'\n]{1,256})(?P=b)"
)


def _command(scan: _Scan, spans: Spans) -> None:
    view, low = scan.view, scan.low
    if " -" in view or "\t-" in view:
        for match in _FLAG.finditer(low):
            if match.start() and (low[match.start() - 1].isalnum() or low[match.start() - 1] in "_-"):
                continue
            start, end = match.span("v")
            value = view[start:end]
            if not _is_placeholder(value) and not (value.isalpha() and value.islower()):
                spans.append((start, _continued(view, end)))
        for cues, regex in _COMMANDS:
            if any(scan.has(cue) for cue in cues):
                _command_values(regex.finditer(low), view, spans)
    for cues, regex in _NO_FLAG_COMMANDS:
        if any(scan.has(cue) for cue in cues):
            _command_values(regex.finditer(low), view, spans)
    for key, sep, at, _ in scan.labels():
        name = key.lower()
        if name == "pass" and sep == ":" and low.endswith(("-pass", "-passin", "-passout"), 0, at - 6):
            _command_values(_OPENSSL.finditer(low, max(0, at - 16), at + 257), view, spans)
        elif name == "auth" and sep == "=":
            _command_values([_AUTH_TUPLE.match(low, at)], view, spans)
    if scan.has("machine"):
        _command_values(_NETRC.finditer(low), view, spans)
    if "AUTH" in view and ("AUTH " in view or "AUTH\t" in view):
        _command_values(_REDIS_AUTH.finditer(view), view, spans)
    if scan.has("pgpass"):
        _command_values(_PGPASS.finditer(low), view, spans)
    if scan.has("kty") and ('"kty"' in view or "'kty'" in view):
        _command_values(_JWK_PRIVATE.finditer(view), view, spans)
    # A raw key is a run of 64 hex digits or more: most texts have none.
    if scan.runs().longest >= 64 and (scan.has("seed") or scan.has("priv") or scan.has("secret")):
        _command_values(
            (m for m in _HEX_SEED.finditer(low) if not m.start() or low[m.start() - 1] not in _WORD_CHARS),
            view,
            spans,
        )
    words = scan.words() if scan.long() else None
    heads = words is None or not words.isdisjoint(_NAMED_TOKEN_HEADS)
    for tail, joined in _NAMED_TOKEN_TAILS:
        # The cue is a word before the tail, or one word with it (``api key``, ``apikey``).
        if words is not None and not (heads and tail.encode() in words) and words.isdisjoint(joined):
            continue
        at = low.find(tail)
        while at >= 0:
            end = at + len(tail)
            head = (
                _NAMED_TOKEN_HEAD.search(low, max(0, at - 7), at)
                if low[end : end + 1] in (" ", "\t")
                else None
            )
            at = low.find(tail, end)
            if head is None or (head.start() and low[head.start() - 1] in _WORD_CHARS):
                continue
            named = _NAMED_VALUE.match(low, end)
            value = view[slice(*named.span("v"))] if named else ""
            # letters and digits, a token: not "api key configuration..."
            if _token_like(value) and any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
                _command_values([named], view, spans)


def _command_values(matches: Iterable[re.Match[str] | None], view: str, spans: Spans) -> None:
    for match in matches:
        if match is None:
            continue
        start, end = match.span("v")
        value = view[start:end]
        if len(value) > 2 and value[0] in "'\"" and value[-1] == value[0]:
            start, end, value = start + 1, end - 1, value[1:-1]
        if not _is_placeholder(value):
            spans.append((start, end))


# Labels, matched on the lowered view: a label word, the rest of its identifier, a separator. Where
# the identifier starts, what its words name, and the value are worked out in Python. The words
# share their first characters in the pattern (``p(?:ass|wd)``): the same matches, fewer tries.
_LABEL_WORDS = r"p(?:ass|wd)|secret|token|c(?:redential|ookie)|key|auth|bearer"
_LABEL_WORDS_CJK = r"密(?:码|钥|碼|鑰)|口令|令牌|秘钥|私钥|金鑰|パスワード|暗証番号|トークン|비밀번호|토큰"
_LABEL_REST = (
    r"[a-z0-9_.\-]{0,48}+(?P<close>[\"'`*\]]{0,3}+)"
    r"(?:[ \t]*\[[^\]\n]{0,24}\])?"  # aws configure's "[None]"
    r"(?P<sep>[ \t]*(?::=|=>|:-|={1,3}|:)|[ \t]+is[ \t]+|[ \t]*(?:是|为|為|は))"
)
_LABEL = re.compile(f"(?:{_LABEL_WORDS}|{_LABEL_WORDS_CJK}){_LABEL_REST}")
# The same without the CJK words, for a text that holds none of their first characters (one
# character is looked for fast): the same matches, a third less time.
_LABEL_LATIN = re.compile(f"(?:{_LABEL_WORDS}){_LABEL_REST}")
_LABEL_CJK_STARTS = "密口令秘私金パ暗ト비토"
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_KEY_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[^\x00-\x7f]+")
# What a key names decides what its value must look like: a password (any value, to the end of the
# line after ":"), a token (one word, not a plain one), or a secret only if its value looks random.
_PASSWORD, _TOKEN, _RANDOM = 3, 2, 1
_PASSWORD_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "密码",
    "口令",
    "密碼",
    "パスワード",
    "暗証番号",
    "비밀번호",
)
_TOKEN_WORDS = (
    "token",
    "apikey",
    "secretkey",
    "accesskey",
    "privatekey",
    "authkey",
    "credential",
    "credentials",
    "令牌",
    "密钥",
    "秘钥",
    "私钥",
    "金鑰",
    "密鑰",
    "トークン",
    "토큰",
)
_STRONG_KEY_QUALIFIERS = frozenset(
    "api secret access private auth client signing encryption master app admin root license shared "
    "deploy ssh gpg pgp webhook consumer service session account subscription storage".split()
)
# Keys that are public by design (``public_key``, ``NEXT_PUBLIC_..._KEY``, Supabase's anon key) or
# an id (SigV4's ``X-Amz-Credential`` is the access key id and scope).
_PUBLIC_QUALIFIERS = frozenset("public publishable pub anon amz".split())
# A word after the label that leaves the value the same secret.
_SAME_SECRET = frozenset(
    "confirmation confirm again repeat old new current value plain plaintext raw b64 base64 hex enc "
    "encoded encrypted base str string input".split()
)
# A word after the label that makes the key name something else.
_NOT_SECRET = frozenset(
    """
    hash hashed hasher digest salt iv nonce count counts limit limits len length max min size type
    types id ids name names file files path paths dir url uri urls endpoint env var vars variable
    field fields label placeholder hint policy rule rules regex pattern expiry expires expiration exp
    ttl timeout lifetime seconds ms at time date required enabled disabled enable disable mode format
    strength reset prompt validator validation error errors message msg helper manager provider store
    storage source header param params prefix suffix usage used index list ref version kind class
    schema spec form column table in stdin cmd command budget cost rate window cache lookup display
    show shown visible mask masked status state check valid invalid changed updated created exists is
    has fingerprint checksum sha md5 location loc arn parameter region pair pairs ring chain vault
    rotation rotated event events scope scopes audience issuer
    """.split()
)


def _key_kind(key: str) -> int:
    """0 when ``key`` names no secret, else :data:`_PASSWORD`, :data:`_TOKEN` or :data:`_RANDOM`."""
    words = [w.lower() for w in _KEY_WORDS.findall(key)]
    for i in range(len(words) - 1, -1, -1):
        word = words[i]
        before = words[i - 1] if i else ""
        if word.endswith(_PASSWORD_WORDS) or (word in ("pwd", "pass") and (before or key.startswith("-"))):
            kind = _PASSWORD
        elif word.endswith(_TOKEN_WORDS) or word in ("pat", "bearer"):
            kind = _TOKEN
        elif word == "key":
            kind = _TOKEN if before in _STRONG_KEY_QUALIFIERS else _RANDOM
        elif word == "auth":
            kind = _RANDOM
        else:
            continue
        tail = words[i + 1 :]
        if any(w in _NOT_SECRET for w in tail) or before in _PUBLIC_QUALIFIERS:
            return 0
        return kind if all(w in _SAME_SECRET for w in tail) else _RANDOM
    return 0


_QUOTED = re.compile(
    r"""(?P<prefix>[frbuFRBU]{0,2})(?P<q>["'`])(?P<v>(?:(?!(?P=q))[^\\\n]|\\.){0,4096})(?P=q)"""
)
# Where a password's value stops: a next "key:" on the same line.
_NEXT_KEY = re.compile(
    r"[ \t]*[,;，；。、][ \t]*[^\s:=：,]{1,40}[ \t]*[:=：]|[ \t]+[^\s:=：]{1,40}[ \t]*[:=：](?:[ \t]|$)"
)
_WORD_VALUE = re.compile(r"[^\s\"'`,;&<>]{1,4096}")
_TRAILING = ".,;:)]}>'\"`*"
_SHELL_KEY = re.compile(r"[ \t]*(?:export[ \t]+|set[ \t]+)?[A-Za-z0-9_.\-]+[ \t]*=")
_COMMAND_AFTER = re.compile(r"[ \t](?:-|\||;|&&|>|<)")
_WORD_BEFORE = re.compile(r"([A-Za-z]{2,24})[ \t]\Z")


def _label(scan: _Scan, spans: Spans) -> None:
    view = scan.view
    examined = 0  # a label inside the value just read is part of that value: not read again
    for key, sep, at, start in scan.labels():
        if start < examined:
            continue
        if key.lower() == "key":  # a lone "key" ("Anon key", "SSH key"): the word before qualifies it
            before = _WORD_BEFORE.search(view, max(0, at - len(sep) - 30), at - len(sep) - 3)
            if before:
                key = before.group(1) + "_" + key
        kind = _key_kind(key)
        if kind:
            span, examined = _value_span(view, at, kind, sep.lower(), key)
            if span:
                spans.append(span)


def _value_span(view: str, at: int, kind: int, sep: str, key: str) -> tuple[tuple[int, int] | None, int]:
    """Where the secret value after a label is, if there is one, and how far the text was read."""
    while at < len(view) and (view[at] in " \t" or view.startswith("**", at)):
        at += 2 if view[at] == "*" else 1  # blanks, and markdown's bold ("**Password:** x")
    quoted = _QUOTED.match(view, at)
    if quoted:
        value = quoted.group("v")
        if quoted.group("prefix") or value[:1] in ",;)+" or ("{" in value and "}" in value):
            return None, at  # a string with a prefix (f"..."), a template, or the end of a string
        if _is_placeholder(value.strip()) or not _fits(value, kind, quoted=True):
            return None, quoted.end()
        return quoted.span("v"), quoted.end()
    if sep in ("is", "是", "为", "為", "は"):
        word = _WORD_VALUE.match(view, at)
        value = word.group().rstrip(_TRAILING) if word else ""
        read = word.end() if word else at
        if not value or _is_placeholder(value) or (sep == "is" and (kind != _PASSWORD or value.isalpha())):
            return None, read
        if (kind == _PASSWORD and _is_prose(value)) or not _fits(value, kind):
            return None, read
        return (at, at + len(value)), read
    line_end = view.find("\n", at, at + 1024)
    line = view[at : line_end if line_end >= 0 else at + 1024]
    word = _WORD_VALUE.match(line)
    if not word:
        return None, at
    first = word.group()
    read = at + word.end()
    if _is_placeholder(first) or _is_code(first, not key.isupper() and sep != "="):
        return None, read
    if kind == _PASSWORD and (sep in (":", "：") or (sep == "=" and _env_line(view, at, line))):
        stop = _NEXT_KEY.search(line)
        value = (line[: stop.start()] if stop else line).split(" #", 1)[0].rstrip()
        if not value:
            return None, read
        if _is_prose(value):  # words, not a password: only a first word that is no word counts
            value = first.rstrip(_TRAILING)
            if not value.isascii() or value.isalpha():
                return None, read
        value = value.rstrip(_TRAILING) or value
        return (at, at + len(value)), at + len(value)
    value = first.rstrip(_TRAILING)
    if not value or not _fits(value, kind):
        return None, read
    passed_along = first != value or view[read : read + 1] in (",", ")")
    if (
        kind == _PASSWORD
        and sep == "="
        and not key.isupper()
        and _IDENTIFIER.fullmatch(value)
        and passed_along
    ):
        return None, read  # ``login(password=password)``: a variable passed along
    end = at + len(value)
    return (at, _continued(view, end) if value == first else end), read


def _fits(value: str, kind: int, quoted: bool = False) -> bool:
    if kind == _RANDOM:
        return _random_value(value)
    if kind == _TOKEN:
        return _token_like(value)
    return not (quoted and _is_prose(value))


def _env_line(view: str, at: int, line: str) -> bool:
    """True when ``KEY=`` starts its line (``.env``, ``export KEY=…``) and no command follows the
    value (``PGPASSWORD=x psql -h db``: there the value is one word)."""
    line_start = view.rfind("\n", max(0, at - 128), at)
    if line_start < 0 and at > 128:
        return False
    return bool(_SHELL_KEY.fullmatch(view, line_start + 1, at)) and not _COMMAND_AFTER.search(line)


# --------------------------------------------------------------------------- gitleaks' rules

#: gitleaks' default rules (MIT), converted to Python regexes by bench/gitleaks_rules.py: beside
#: this module, loaded with it (by path too). See gitleaks_rules.LICENSE.
GITLEAKS_FILE = Path(__file__).with_name("gitleaks_rules.json")
# Bytes that are not ASCII letters or digits become spaces: a text's words, split in C.
_NOT_ALNUM = bytes(c if chr(c).isascii() and chr(c).isalnum() else 32 for c in range(256))


def _split_words(low: str) -> list[bytes]:
    """The words of a lowered text: maximal runs of ASCII letters and digits."""
    return low.encode("utf-8", "surrogatepass").translate(_NOT_ALNUM).split()


class _Leaks(NamedTuple):
    version: str
    rules: tuple[dict, ...]
    by_core: dict[bytes, tuple[int, ...]]  # a keyword's first word -> the rules it gates
    cores: frozenset[bytes]
    glued: dict[str, tuple[str, ...]]  # cores by their first two letters, for the starts of runs
    direct: tuple[tuple[str, int], ...]  # keywords whose first word is one letter: looked for as is
    bounded: frozenset[str]  # keywords a rule's ``\\b`` must precede: found only after a non-word character
    allow: tuple[re.Pattern[str], ...]
    stopwords: tuple[str, ...]
    needs: tuple[int, ...]  # per rule, the run of token characters each match holds (:func:`_run_needed`)
    shared: tuple[str, ...]  # per rule of several keywords, a part all hold (``times``): one look for all
    pieces: dict[str, str]  # keyword -> its longest part of letters and digits, three or more (``authress``)


def _core(keyword: str) -> str:
    word = re.search(r"[a-z0-9]+", keyword)
    return word.group() if word else keyword


@functools.cache
def gitleaks_rules() -> _Leaks | None:
    """gitleaks' rules as shipped beside this module, or None when the file is missing or does not
    read (the rules above still run)."""
    try:
        data = json.loads(GITLEAKS_FILE.read_text(encoding="utf-8"))
        rules = tuple(data["rules"])
        by_core: dict[bytes, set[int]] = {}
        direct = []
        bounded: set[str] = set()
        whole: set[str] = set()  # keywords that are one word: they may be glued to a token (dapi0123...)
        for index, rule in enumerate(rules):
            for keyword in rule["keywords"]:
                core = _core(keyword)
                if len(core) > 1:
                    by_core.setdefault(core.encode("ascii"), set()).add(index)
                    if core == keyword:
                        whole.add(core)
                else:
                    direct.append((keyword, index))
                    if rule["regex"].startswith("\\b") and (keyword[:1].isalnum() or keyword[:1] == "_"):
                        bounded.add(keyword)
        glued: dict[str, tuple[str, ...]] = {}
        # A keyword with more after its first word (``shpat_``) has that word split off on its own.
        for word in sorted(whole):
            glued[word[:2]] = (*glued.get(word[:2], ()), word)
        return _Leaks(
            str(data["version"]),
            rules,
            {core: tuple(sorted(ids)) for core, ids in by_core.items()},
            frozenset(by_core),
            glued,
            tuple(direct),
            frozenset(bounded),
            tuple(re.compile(r, re.ASCII) for r in data["allow"]["regexes"]),
            tuple(data["allow"]["stopwords"]),
            tuple(_run_needed(rule["regex"]) for rule in rules),
            tuple(_shared_part(rule["keywords"]) for rule in rules),
            {
                keyword: max(pieces, key=len)
                for rule in rules
                for keyword in rule["keywords"]
                if (pieces := [piece for piece in re.findall("[a-z0-9]+", keyword) if len(piece) >= 3])
            },
        )
    except Exception:
        return None


def _shared_part(keywords: list[str]) -> str:
    """A part of three characters or more that each of several keywords holds, the longest, and
    one outside the shortest first word if there is one (``new-york-times``, ``newyorktimes``,
    ``nytimes``: ``times``, as ``new`` is what let the rule run); else "" (one keyword is looked for
    as is). A text without it holds none of the keywords."""
    if len(keywords) < 2:
        return ""
    shortest = min(keywords, key=len)
    first_word = min((_core(keyword) for keyword in keywords), key=len)
    parts = [
        shortest[start : start + size]
        for size in range(len(shortest), 2, -1)
        for start in range(len(shortest) - size + 1)
        if all(shortest[start : start + size] in keyword for keyword in keywords)
    ]
    return next((part for part in parts if part not in first_word), parts[0] if parts else "")


def _run_needed(pattern: str) -> int:
    """How long a run of token characters (``[A-Za-z0-9_-]``) every match of ``pattern`` holds, at
    least: a rule whose secret is ``[a-f0-9]{32}`` cannot match a text whose runs are all shorter, and
    is not read there. 0 when that is under twelve (the runs :class:`_Runs` sees start there) or
    when the pattern cannot be read (``re._parser`` is Python's own parser, not a public API: then
    every rule is read, as before).

    A lower bound, read off the parsed pattern under ``re.ASCII`` (the flag rules compile with: no
    Unicode case folding, ``\\w`` is ``[A-Za-z0-9_]``): characters of token sets side by side add up,
    a repeat of one adds its minimum, zero-width assertions pass; a group, an alternation (its
    shortest branch) or a repeat of a group counts on its own and ends the run around it."""
    try:
        parser = importlib.import_module("re._parser")  # at first use, with the rules
        needed = _parsed_run(parser, parser.parse(pattern, re.ASCII))
    except Exception:
        return 0
    return needed if needed >= 12 else 0


def _parsed_run(parser: Any, items: Any) -> int:
    """:func:`_run_needed` of a parsed sequence: the longest run it is sure to hold."""
    best = current = 0
    for op, arg in items:
        if op in (parser.AT, parser.ASSERT, parser.ASSERT_NOT):
            continue  # zero width: the characters either side stay side by side
        if _token_char(parser, op, arg):
            current += 1
        elif op in (parser.MAX_REPEAT, parser.MIN_REPEAT, parser.POSSESSIVE_REPEAT):
            least, _, body = arg
            if len(body) == 1 and _token_char(parser, *body[0]):
                current += least
            else:
                best = max(best, _parsed_run(parser, body) if least else 0)
                current = 0
        elif op is parser.SUBPATTERN:
            best = max(best, _parsed_run(parser, arg[-1]))
            current = 0
        elif op is parser.BRANCH:
            best = max(best, min(_parsed_run(parser, branch) for branch in arg[1]))
            current = 0
        else:
            current = 0
        best = max(best, current)
    return best


def _token_char(parser: Any, op: Any, arg: Any) -> bool:
    """A parsed item that is one character, always a token character."""
    if op is parser.LITERAL:
        return chr(arg) in _TOKEN_CHARS
    if op is not parser.IN:
        return False
    for kind, value in arg:
        if kind is parser.LITERAL:
            if chr(value) not in _TOKEN_CHARS:
                return False
        elif kind is parser.RANGE:
            if not all(chr(c) in _TOKEN_CHARS for c in range(value[0], value[1] + 1)):
                return False
        elif kind is not parser.CATEGORY or value not in (parser.CATEGORY_DIGIT, parser.CATEGORY_WORD):
            return False  # a negated set, a category of spaces...
    return True


@functools.cache
def _leak_regex(index: int) -> re.Pattern[str]:
    leaks = gitleaks_rules()
    assert leaks is not None
    return re.compile(leaks.rules[index]["regex"], re.ASCII)


@functools.cache
def _allow_regexes(index: int) -> tuple[tuple[str, str, tuple[re.Pattern[str], ...], tuple[str, ...]], ...]:
    leaks = gitleaks_rules()
    assert leaks is not None
    return tuple(
        (
            a["condition"],
            a["target"],
            tuple(re.compile(r, re.ASCII) for r in a["regexes"]),
            tuple(a["stopwords"]),
        )
        for a in leaks.rules[index]["allow"]
    )


def _entropy(value: str) -> float:
    """Shannon entropy in bits per character, as gitleaks computes it."""
    size = len(value)
    return -sum(n / size * math.log2(n / size) for n in Counter(value).values()) if size else 0.0


def _allowed(index: int, secret: str, match: str, line: str) -> bool:
    """True when one of the rule's allowlists lets the finding go."""
    lowered = secret.lower()
    for condition, target, regexes, stopwords in _allow_regexes(index):
        subject = match if target == "match" else line if target == "line" else secret
        checks = []
        if regexes:
            checks.append(any(r.search(subject) for r in regexes))
        if stopwords:
            checks.append(any(w in lowered for w in stopwords))
        if checks and (all(checks) if condition == "AND" else any(checks)):
            return True
    return False


def _gitleaks(scan: _Scan, spans: Spans) -> None:
    """gitleaks' rules whose keywords occur, each run on the lines around its keywords.

    A keyword counts when its first word (letters and digits) is one of the text's words, or starts
    a run of token characters (``dapi0123...``), or, for a one-letter word (``q~``, ``s.``), when it
    occurs as is; then, as gitleaks does, the keyword itself must occur in the lowered text. A rule
    runs on each line that holds one of its keywords and the line after (gitleaks' rules are read
    line by line; reading only there keeps a long text cheap). The secret is the rule's secret
    group, else its first group that matched, else the whole match; it counts when its entropy is
    over the rule's, no allowlist (the rule's, gitleaks' global one) lets it go, and it is no
    stand-in."""
    leaks = gitleaks_rules()
    if leaks is None:
        return
    view, low = scan.view, scan.low
    runs = scan.runs()
    found = leaks.cores.intersection(scan.words() if scan.long() else _split_words(low))
    if runs.glued:
        found = found.union(
            core.encode()
            for run in runs.glued
            if run.startswith(leaks.glued[run[:2]])
            for core in leaks.glued[run[:2]]
            if run.startswith(core)
        )
    needs, longest = leaks.needs, runs.longest
    indexes = {i for core in found for i in leaks.by_core[core] if needs[i] <= longest}
    bounded = leaks.bounded
    # In a long text a keyword is first looked for by its longest part of letters and digits, in the
    # text's words (:meth:`_Scan.has`): absent there, it is absent from the text.
    pieces = leaks.pieces if scan.long() else {}
    words = scan.words() if scan.long() else frozenset()
    for keyword, i in leaks.direct:
        if (
            i not in indexes
            and needs[i] <= longest
            and keyword[-1] in low  # one character is looked for fast: "~" of "q~" is rare
            and (keyword not in pieces or scan.has(pieces[keyword]))
            # after a \b, a keyword's first letter (``s`` of ``s.``: its word is one letter) is a word
            and not (
                words and keyword in bounded and keyword[0].isalnum() and keyword[0].encode() not in words
            )
            and keyword in low
            and (keyword not in bounded or _occurrences(low, keyword, True, 1))
        ):
            indexes.add(i)
    where: dict[str, list[int]] = {}
    for index in sorted(indexes):
        rule = leaks.rules[index]
        if leaks.shared[index] and leaks.shared[index] not in low:
            continue  # none of its keywords is there
        if len(view) <= _WHOLE_TEXT:  # short: the whole text, once a keyword is there
            if any(keyword in low for keyword in rule["keywords"]):
                _leak_matches(leaks, index, view, 0, len(view), spans)
            continue
        windows: list[tuple[int, int]] = []
        for keyword in rule["keywords"]:
            if keyword not in where:
                absent = keyword in pieces and not scan.has(pieces[keyword])
                where[keyword] = [] if absent else _occurrences(low, keyword, keyword in bounded)
            windows += [_lines_around(view, at) for at in where[keyword]]
        for start, end in _merged_windows(windows):
            _leak_matches(leaks, index, view, start, end, spans)


_WHOLE_TEXT = 2048  # characters: up to this length a rule reads the whole text


def _occurrences(low: str, keyword: str, bounded: bool = False, most: int = 32) -> list[int]:
    """Where ``keyword`` occurs in ``low`` (``bounded``: only after a character that is no word's,
    where the rule's ``\\b`` can be); ``[-1]`` (the whole text) past ``most``."""
    found: list[int] = []
    at = low.find(keyword)
    while at >= 0:
        if not bounded or at == 0 or low[at - 1] not in _WORD_CHARS:
            if len(found) == most:
                return [-1]
            found.append(at)
        at = low.find(keyword, at + 1)
    return found


_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _lines_around(view: str, at: int) -> tuple[int, int]:
    """From just before the line holding ``at`` (its line break: ``\\s`` may need it) to the end of
    the line after; ``at`` -1 for the whole text."""
    if at < 0:
        return 0, len(view)
    start = max(0, view.rfind("\n", 0, at))
    end = view.find("\n", at)
    end = view.find("\n", end + 1) if end >= 0 else -1
    return start, end if end >= 0 else len(view)


def _merged_windows(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _leak_matches(leaks: _Leaks, index: int, view: str, start: int, end: int, spans: Spans) -> None:
    rule = leaks.rules[index]
    for match in _leak_regex(index).finditer(view, start, end):
        group = rule["group"] or next((g for g in range(1, match.re.groups + 1) if match.group(g)), 0)
        secret = match.group(group)
        if not secret or (rule["entropy"] and _entropy(secret) <= rule["entropy"]):
            continue
        if _is_placeholder(secret) or any(r.search(secret) for r in leaks.allow):
            continue
        if any(w in secret.lower() for w in leaks.stopwords):
            continue
        if rule["allow"]:
            line_start = view.rfind("\n", 0, match.start()) + 1
            line_end = view.find("\n", match.end())
            line = view[line_start : line_end if line_end >= 0 else len(view)]
            if _allowed(index, secret, match.group(), line):
                continue
        spans.append(match.span(group))


#: The rules, in the order they run: (name, function(scan, spans)).
RULES: tuple[tuple[str, Callable[[_Scan, Spans], None]], ...] = (
    ("armor", _armor),
    ("prefix", _prefix),
    ("token", _token),
    ("url", _url),
    ("header", _header),
    ("command", _command),
    ("label", _label),
    ("gitleaks", _gitleaks),
)

# --------------------------------------------------------------------------- redaction


def _spans(text: str, patterns: tuple[str, ...]) -> Spans:
    """The original's spans to redact, merged, in order."""
    view = _View(text)
    scan = _Scan(view.text, patterns)
    found: Spans = []
    for _, rule in RULES:
        rule(scan, found)
    merged: Spans = []
    for start, end in sorted(view.original_span(s, e) for s, e in found):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _redact(text: str, patterns: tuple[str, ...]) -> str:
    pieces: list[str] = []
    done = 0
    for start, end in _spans(text, patterns):
        if text[start:end] != PLACEHOLDER:
            pieces += (text[done:start], PLACEHOLDER)
            done = end
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def redact_secrets(text: str) -> str:
    """``text`` with every credential-looking span replaced by :data:`PLACEHOLDER`, labels kept.

    ``text`` itself when nothing is redacted. Never raises: on an internal failure the whole text
    becomes :data:`PLACEHOLDER` (fail closed)."""
    if not text:
        return text
    try:
        return _redact(text if isinstance(text, str) else str(text), prefix_patterns())
    except Exception:
        return PLACEHOLDER


def redact_with(text: str, use_hermes: bool) -> str:
    """:func:`redact_secrets` with Hermes's prefix list or with the fallback (tests, benches)."""
    return _redact(text, prefix_patterns(use_hermes)) if text else text


def explain(text: str, use_hermes: bool = True) -> list[tuple[str, int, int]]:
    """Each rule's spans in ``text`` (original offsets), unmerged: (rule name, start, end)."""
    view = _View(text)
    scan = _Scan(view.text, prefix_patterns(use_hermes))
    found: list[tuple[str, int, int]] = []
    for name, rule in RULES:
        spans: Spans = []
        rule(scan, spans)
        found += [(name, *view.original_span(s, e)) for s, e in spans]
    return found


# --------------------------------------------------------------------------- error texts

_ECHOED_PIECE = re.compile(r"[A-Za-z0-9_\-+/=.~]{8,}")


def _forms(secret: str) -> set[str]:
    """The ways ``secret`` may come back in an error body: as is, URL-encoded, base64 (padded or
    not, standard or URL-safe), JSON-escaped."""
    forms = {secret, quote(secret, safe=""), quote_plus(secret, safe=""), quote(secret)}
    raw = secret.encode("utf-8", "surrogatepass")
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        value = encoded.decode("ascii")
        forms.update((value, value.rstrip("=")))
    forms.add(secret.replace("\\", "\\\\").replace('"', '\\"').replace("/", "\\/"))
    return forms


def _secret_parts(secret: str) -> set[str]:
    """``secret``; for a URL (a ``base_url``) not the URL but its userinfo (``user:pw``, decoded
    too), password, query values and fragment: the host and path are no secret."""
    if "://" not in secret:
        return {secret} if len(secret) >= 4 else set()
    parts: set[str] = set()
    try:
        url = urlsplit(secret)
        if "@" in url.netloc:
            userinfo = url.netloc.rsplit("@", 1)[0]
            user, _, password = userinfo.partition(":")
            parts.update((userinfo, password, unquote(password), f"{unquote(user)}:{unquote(password)}"))
        parts.update(value for _, value in parse_qsl(url.query))
        parts.add(url.fragment)
    except ValueError:
        pass
    return {part for part in parts if len(part) >= 4}


def scrub_error(text: str, secrets: Iterable[str | None]) -> str:
    """An error text (a provider's body echoing what it was sent) with each of ``secrets`` (an API
    key, a base_url) removed in every form it may come back in (:func:`_forms`; a URL's userinfo,
    password and query values, ``user:password`` as base64 for ``Authorization: Basic``), every run
    of eight characters or more cut out of a secret of sixteen or more (a key echoed shortened),
    then :func:`redact_secrets`. Parts shorter than four characters are left to the latter. Never
    raises: on an internal failure returns :data:`PLACEHOLDER`."""
    if not text:
        return text
    try:
        text = text if isinstance(text, str) else str(text)
        parts: set[str] = set()
        for secret in secrets or ():
            if secret:
                parts |= _secret_parts(str(secret))
        forms: set[str] = set()
        for part in parts:
            forms |= _forms(part)
        for form in sorted(forms, key=len, reverse=True):
            if len(form) >= 4 and form in text:
                text = text.replace(form, PLACEHOLDER)
        long_parts = [part for part in parts if len(part) >= 16]
        if long_parts:
            text = _ECHOED_PIECE.sub(
                lambda m: PLACEHOLDER if any(m.group() in part for part in long_parts) else m.group(), text
            )
        return redact_secrets(text)
    except Exception:
        return PLACEHOLDER
