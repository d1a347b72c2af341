"""Shapes issue 31 found leaking that gitleaks' rules do not cover: command-line passwords,
NuGet's ClearTextPassword, labels without ``=`` or ``:``, bare Stripe webhook and New Relic keys,
a ``.pgpass`` line, a JSON Web Key's private members, a raw ed25519 seed in hex. Made-up values;
prose that names the same words, and the hex and base64 of ordinary developer text (git ids,
lockfile integrity hashes, docker digests, UUIDs, a public JWK), stay as they are."""

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
    (
        '{"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",\n'
        ' "d": "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"}',
        "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A",
    ),
    (
        "{'kty': 'RSA', 'n': 'AQAB', 'e': 'AQAB', 'd': 'X4cTteJY_gn4FYPsXB8rdXix5vwsg1FLN5E3EaG6RJo'}",
        "X4cTteJY_gn4FYPsXB8rdXix5vwsg1FLN5E3EaG6RJo",
    ),
    ('{"keys": [{"kty": "oct", "k": "GawgguFyGrWKav7AX4VKUg", "alg": "A128KW"}]}', "GawgguFyGrWKav7AX4VKUg"),
    (
        "ed25519 seed: 9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    ),
    (
        "private key (hex): 4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
    ),
    (
        'signer = SigningKey(seed="c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7")',
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
    ),
]
PROSE = [
    "we use the auth middleware for AUTH headers",
    "set the api key in the dashboard",
    "Verifying TestSprite API key configuration...",
    "client_secret configuration lives in vault",
    "the access token expires in one hour",
    # hex and base64 that are no secret, beside the words the JWK and seed rules look for
    "commit 3f9a1c2b7d4e5f60718293a4b5c6d7e8a9b0c1d2 fixes the private key loader",
    "seed 3f9a1c2b7d4e5f60718293a4b5c6d7e8a9b0c1d2 (git rev-parse HEAD)",
    '"integrity": "sha512-Kq5sNclPz7QV2+lfQIuXMBrS3z9Mq0cNMB3bMtCqwA4g0dAq6ybkVg2B'
    'fhPXGHEP0N2R0PQJ1dc+Gb7C5KIB8A==" (private key lib)',
    "private key lib: lodash sha256-9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "private key image app@sha256:9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "seed digest sha256:9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "the seed row 123e4567-e89b-12d3-a456-426614174000 holds the private key id",
    '{"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",'
    ' "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0", "kid": "key-2024-01"}',
    "random seed: 42; seed_everything(1234)",
]


@pytest.mark.parametrize(("text", "secret"), LEAKED)
def test_the_shape_is_redacted(text, secret):
    assert secret not in redact.redact_secrets(text)


@pytest.mark.parametrize("text", PROSE)
def test_prose_about_the_same_words_is_left_alone(text):
    assert redact.redact_secrets(text) == text


def test_the_keyword_gate_loses_none_of_gitleaks_findings():
    """Every gitleaks rule run as gitleaks runs it (on the whole text, when one of its keywords
    occurs in the lowered text) finds nothing in a corpus text that redaction leaves, though
    redaction gates them (keywords as words or run starts, a ``\\b`` keyword only after a non-word
    character; lines around a keyword in a long text): the gate is a saving, not a filter."""
    corpus = []
    for name in ("credentials.py", "credentials_upstream.py"):
        path = Path(__file__).resolve().parents[1] / name
        spec = importlib.util.spec_from_file_location(f"_corpus_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        corpus += [entry.text for entry in module.CORPUS]
    leaks = redact.gitleaks_rules()
    assert leaks is not None
    padding = "lorem ipsum dolor sit amet, users.append(x); " * 60  # long texts read lines around keywords
    checked = 0
    for text in corpus + [padding + t + padding for t in corpus]:
        redacted = redact._spans(text, redact.prefix_patterns())
        everything: list[tuple[int, int]] = []
        low = text.lower()
        for index, rule in enumerate(leaks.rules):
            if any(keyword in low for keyword in rule["keywords"]):  # gitleaks' own gate
                redact._leak_matches(leaks, index, text, 0, len(text), everything)
        for start, end in everything:
            assert any(s <= start and end <= e for s, e in redacted), (text, text[start:end])
        checked += bool(everything)
    assert checked >= 40  # the corpora hold shapes gitleaks' rules find
