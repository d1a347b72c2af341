"""Shapes issue 31 found leaking that gitleaks' rules do not cover: command-line passwords,
NuGet's ClearTextPassword, labels without ``=`` or ``:``, bare Stripe webhook and New Relic keys,
a ``.pgpass`` line. Made-up values; prose that names the same words stays as it is."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REDACT = Path(__file__).resolve().parents[2] / "project-history-recall" / "text" / "redact.py"
_spec = importlib.util.spec_from_file_location("_redact_named_under_test", REDACT)
redact = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(redact)

LEAKED = [
    (
        "ldapsearch -x -H ldap://ldap.example.org -D cn=admin,dc=example,dc=org -w Zq7v!pLm2x -b dc=x",
        "Zq7v!pLm2x",
    ),
    ("htpasswd -bc /etc/nginx/.htpasswd deploy Hj3kL9mnQ2", "Hj3kL9mnQ2"),
    ("nmcli dev wifi connect HomeNet password Wq8rT2yU6i", "Wq8rT2yU6i"),
    ("nmcli con modify office wifi-sec.psk Lm4nB7vC1x", "Lm4nB7vC1x"),
    ("127.0.0.1:6379> AUTH Rk9sD3fG7h", "Rk9sD3fG7h"),
    ('<add key="ClearTextPassword" value="Nu9Get!Pass42" />', "Nu9Get!Pass42"),
    ("client_secret 3f9a1c2b7d4e5f60718293a4b5c6d7e8", "3f9a1c2b7d4e5f60718293a4b5c6d7e8"),
    ("the deploy token gldt-Ab3Cd5Ef7Gh9Ij1Kl3Mn", "gldt-Ab3Cd5Ef7Gh9Ij1Kl3Mn"),
    ("signing secret " + "whsec_" + "4eC39HqLyjWDarjtT1zdp7dc4eC39Hq", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("key " + "NRAK-" + "4F7B2C9D1E8A3B6C5D4E7F2A1B9", "4F7B2C9D1E8A3B6C5D4E7F2A1B9"),
    ("$ cat ~/.pgpass\ndb.internal:5432:orders:app:Pg7sQ2wE9r\n", "Pg7sQ2wE9r"),
]
PROSE = [
    "we use the auth middleware for AUTH headers",
    "set the api key in the dashboard",
    "Verifying TestSprite API key configuration...",
    "client_secret configuration lives in vault",
    "the access token expires in one hour",
]


@pytest.mark.parametrize(("text", "secret"), LEAKED)
def test_the_shape_is_redacted(text, secret):
    assert secret not in redact.redact_secrets(text)


@pytest.mark.parametrize("text", PROSE)
def test_prose_about_the_same_words_is_left_alone(text):
    assert redact.redact_secrets(text) == text
