"""Credential-looking spans out of text before it leaves the machine (issue 8, item 13).

People paste keys, tokens, private keys and passwords into conversations. The in-process model
may see them (nothing leaves the machine); a remote embedding provider gets this placeholder
instead. Redaction happens at the HTTP provider's door, after hashing, so the stored
``content_hash`` still describes the original text and incremental indexing stays exact. A
vector of "[redacted]" in place of a token loses nothing a search would want to find.

The patterns err on the side of redacting: known token formats, PEM blocks, credentials in URLs,
and values after a label (``password:``, ``token =``, ``密码：``, ``令牌``...).
"""

from __future__ import annotations

import re

PLACEHOLDER = "[redacted]"

_LABELS = (
    r"pass(?:word|wd|phrase)?|pwd|secret(?:[ _-]?key)?|(?:api|access|auth|private|client)[ _-]?"
    r"(?:key|token|secret)|token|bearer|credentials?|密码|口令|令牌|密钥|秘钥|私钥|访问令牌|パスワード|비밀번호"
)

_PATTERNS: tuple[re.Pattern[str], ...] = (
    # PEM private keys, whole block.
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
    # Well-known token formats.
    re.compile(r"\b(?:sk|rk|pk)-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_-]{16,}"),  # OpenAI, Anthropic, Stripe...
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
    # Credentials inside URLs: scheme://user:password@host
    re.compile(r"(?<=://)[^\s/@:]+:[^\s/@]+(?=@)"),
    # Authorization headers.
    re.compile(r"(?i)(?<=\bbearer )[A-Za-z0-9._~+/=-]{12,}"),
)
# A label, a separator (or "is"), then the value up to whitespace or a quote.
_LABELLED = re.compile(
    rf"(?i)((?:{_LABELS})[\"']?\s*(?:[:=：]|\bis\b|是|为|為)\s*[\"']?)([^\s\"'，。、；;,]+)"
)


def redact_secrets(text: str) -> str:
    """``text`` with every credential-looking span replaced by :data:`PLACEHOLDER`."""
    if not text:
        return text
    for pattern in _PATTERNS:
        text = pattern.sub(PLACEHOLDER, text)
    return _LABELLED.sub(lambda m: m.group(1) + PLACEHOLDER, text)
