"""text/redact.py: every credential shape of tests/credentials.py redacted, ordinary code and logs left
alone, labels kept, idempotent, never raising. Pure: the module is loaded by its path, no Hermes
is booted (Hermes's prefix list is imported if the ``agent`` package is installed, as in the
plugin's venv; the tests that compare with it are skipped otherwise)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


redact = _load("_redact_under_test", REPO / "project-history-recall" / "text" / "redact.py")
CORPUS = _load("_credentials", REPO / "tests" / "credentials.py").CORPUS
P = redact.PLACEHOLDER
HERMES = redact.hermes_prefix_patterns() is not None


def _budget(test):
    """Fifty examples, unless HYPOTHESIS_PROFILE chose a profile (tests/conftest.py loads it)."""
    return test if os.environ.get("HYPOTHESIS_PROFILE") else settings(max_examples=50, deadline=None)(test)


# --------------------------------------------------------------------------- the corpus

# The forms the issue found leaking, each present in the corpus by name.
ISSUE_FORMS = (
    "stripe live secret key",
    "aws keys in .env",
    "azure openai key",
    "authorization basic",
    "postgres url with @ in the password",
    "mysql -p",
    "sendgrid key in prose",
    "slack webhook url",
    "pgp private key block",
    "yaml multi-word password",
    "key split by zero-width space",
    "full-width label",
    "4096-bit key, only the end half (a chunk)",
)


def test_the_corpus_covers_the_issue_and_forty_shapes():
    names = [entry.name for entry in CORPUS]
    assert len(names) == len(set(names)) >= 40
    assert set(ISSUE_FORMS) <= set(names)
    assert all(entry.secrets and all(entry.secrets) for entry in CORPUS)
    assert all(secret in entry.text for entry in CORPUS for secret in entry.secrets)


@pytest.mark.parametrize("entry", CORPUS, ids=[entry.name for entry in CORPUS])
def test_every_secret_of_the_corpus_is_gone(entry):
    redacted = redact.redact_secrets(entry.text)
    assert P in redacted
    left = [secret for secret in entry.secrets if secret in redacted]
    assert not left, redacted
    assert redact.redact_secrets(redacted) == redacted  # idempotent
    fallback = redact.redact_with(entry.text, use_hermes=False)
    assert not [secret for secret in entry.secrets if secret in fallback], fallback


@pytest.mark.skipif(not HERMES, reason="agent.redact (Hermes) is not importable here")
def test_the_fallback_prefix_list_agrees_with_hermess_on_the_corpus():
    for entry in CORPUS:
        assert redact.redact_with(entry.text, use_hermes=False) == redact.redact_with(
            entry.text, use_hermes=True
        )
    # Every fallback pattern is one of Hermes's (the fallback is a subset, not a private list).
    assert set(redact.FALLBACK_PREFIX_PATTERNS) <= set(redact.hermes_prefix_patterns())


def test_hermess_list_is_read_at_first_use_not_at_import():
    source = (REPO / "project-history-recall" / "text" / "redact.py").read_text()
    top_level_imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert all("agent" not in line for line in top_level_imports)


def test_hermess_switch_does_not_turn_redaction_off(monkeypatch):
    monkeypatch.setenv("HERMES_REDACT_SECRETS", "false")
    fresh = _load("_redact_switch_off", REPO / "project-history-recall" / "text" / "redact.py")
    assert fresh.redact_secrets("OPENAI_API_KEY=sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2") == f"OPENAI_API_KEY={P}"


# --------------------------------------------------------------------------- labels and layout kept

KEPT_AROUND = [
    ("password: correct horse battery staple", f"password: {P}"),
    ('password = "Don\'t4get!"  # ok', f'password = "{P}"  # ok'),
    ("database:\n  password: hunter2 # prod\n  host: db", f"database:\n  password: {P} # prod\n  host: db"),
    ('{"api_key": "a1b2c3d4e5f6a7b8c9d0", "model": "m"}', f'{{"api_key": "{P}", "model": "m"}}'),
    ("Authorization: Bearer 8f3c2a9d7e1b4f6a0c5d", f"Authorization: Bearer {P}"),
    ("postgres://app:p@ss@db.internal:5432/app", f"postgres://app:{P}@db.internal:5432/app"),
    ("mysql -uroot -pS3cret!x app", f"mysql -uroot -p{P} app"),
    ("docker login -u me -p Dck3r!pw reg.io", f"docker login -u me -p {P} reg.io"),
    ("curl -u admin:S3cr3t https://ci/api", f"curl -u admin:{P} https://ci/api"),
    ("数据库密码：Zh0ng#2024，用户名：root", f"数据库密码：{P}，用户名：root"),  # full-width kept
    ("ｐａｓｓｗｏｒｄ：ｈｕｎｔｅｒ２ｚ", f"ｐａｓｓｗｏｒｄ：{P}"),
    ("key: sk-pro\u200bj-A1b2C3d4E5f6G7h8 ok", f"key: {P} ok"),
    ("${DB_PASSWORD:-S3cretDefault}", f"${{DB_PASSWORD:-{P}}}"),
    (
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5\n"
        "-----END EC PRIVATE KEY-----",
        f"-----BEGIN EC PRIVATE KEY-----\n{P}\n-----END EC PRIVATE KEY-----",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{P}",
    ),
]


@pytest.mark.parametrize(("text", "expected"), KEPT_AROUND)
def test_only_the_secret_is_replaced_and_its_label_stays(text, expected):
    assert redact.redact_secrets(text) == expected


# --------------------------------------------------------------------------- ordinary text stays

# Code, logs and prose that name secrets without holding one: each must come back unchanged (the
# same object). The reason a line is not a credential is given where it is not obvious.
ORDINARY = [
    "self.api_key = api_key",  # a name assigned a name
    "if password:",
    "if not token:\n    raise AuthError('missing token')",
    "password_hash = bcrypt.hashpw(password.encode(), bcrypt.gensalt())",  # "hash": not the secret
    "user.password_hash = '$2b$12$KIXQJmBqJ8r0pQ1mN2x3yO4z5A6B7C8D9E0F1G2H3I4J5K6'",  # a hash, not a password
    "def login(username: str, password: str) -> Token:",
    "password: str = Field(..., min_length=8)",  # a type
    "password: string;",
    "max_tokens=4096, temperature=0.2",  # tokens of a model, plural: a count
    "token_count: 1532",
    "tokenizer.pad_token = tokenizer.eos_token",  # an expression
    'cache_key = f"user:{user_id}:profile"',  # a template
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",  # no secret label
    "commit 3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a",  # a git SHA
    "request_id=550e8400-e29b-41d4-a716-446655440000",  # a UUID under a label that names no secret
    "const apiKey = process.env.OPENAI_API_KEY;",  # a reference
    'api_key = os.environ["OPENAI_API_KEY"]',
    "token: ${{ secrets.GITHUB_TOKEN }}",
    "SECRET_KEY = env('DJANGO_SECRET_KEY')",
    "token = jwt.encode(payload, settings.SECRET_KEY, algorithm='HS256')",
    'headers = {"Authorization": f"Bearer {token}"}',
    '-H "Authorization: Bearer $OPENAI_API_KEY"',
    "DATABASE_URL=postgresql://{user}:{password}@{host}:5432/{db}",
    "postgres://user:${DB_PASSWORD}@localhost:5432/app",
    "git clone git@github.com:acme/app.git",  # a user, no password
    "https://github.com/acme/app/blob/main/src/auth/token.py#L42",
    "KeyError: 'api_key'",
    "Error: Invalid API key provided. Check your key at https://platform.openai.com/account/api-keys.",
    "we discussed the token bucket algorithm",
    "The token bucket algorithm refills at a fixed rate.",
    "keyboard: us, monkey: 3",  # "key" inside other words
    "primary_key=True, index=True",
    "password_reset_token_expires_in: 3600",
    "show_password: false",
    '<input type="password" name="password" placeholder="Password">',
    "Password: ********",  # already masked
    '"password": "[REDACTED]"',  # already redacted (the transcripts' own placeholder)
    "PGPASSWORD=$DB_PASS psql -h db",
    "docker run -p 8080:80 -e POSTGRES_PASSWORD_FILE=/run/secrets/db nginx",  # -p: a port
    "git push -u origin feature/auth-token-refresh",
    "mysql -u root -p app < dump.sql",  # -p alone: mysql asks for the password
    "sk_learn_model = load('model.pkl')",  # a prefix followed by words, not a token
    "auth_router = APIRouter(prefix='/auth')",
    "const { token } = await res.json();",
    "localStorage.setItem('token', data.token)",
    "password = getpass.getpass('DB password: ')",
    "public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",  # public
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n"
    "RTESMBAGA1UEChMJQmFsdGltb3JlMRMwEQYDVQQLEwpDeWJlclRydXN0MSIwIAYD\n-----END CERTIFICATE-----",
    'img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"',
    "Set the OPENAI_API_KEY environment variable before running.",
    "Password: `DB_PASSWORD` from the vault",  # the name of a variable
    "if (enteredPassword == null || enteredPassword.isEmpty())",
    "密码错误，请重新输入",
    "请输入密码：",
    "令牌已过期，请重新登录",
    "- **Client Secret**: 已填写(从 Google Console 获取)",  # prose in the value's place
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_code_and_logs_stay_as_they_were(text):
    assert redact.redact_secrets(text) is text


# Decided the other way: these hold a literal secret, even if a weak or a default one.
DECIDED_SECRET = [
    ('password = "hunter2"', f'password = "{P}"'),  # a literal password in code is still one
    ("postgresql://postgres:postgres@localhost:5432/app", f"postgresql://postgres:{P}@localhost:5432/app"),
    ('{"username": "admin", "password": "admin"}', f'{{"username": "admin", "password": "{P}"}}'),
    (
        "s3.amazonaws.com/f.png?X-Amz-Signature=3e24fec95f8edeeaf4eb",
        f"s3.amazonaws.com/f.png?X-Amz-Signature={P}",
    ),
]


@pytest.mark.parametrize(("text", "expected"), DECIDED_SECRET)
def test_weak_and_default_credentials_are_still_redacted(text, expected):
    assert redact.redact_secrets(text) == expected


# --------------------------------------------------------------------------- error texts


def test_scrub_error_removes_each_form_a_secret_can_come_back_in():
    key = "sk-" + "proj-A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
    base_url = "https://bob:p%40ss%3Aw0rd@embed.example.com/v1?api-key=Q9w8E7r6T5y4&region=eu"
    body = (
        f"401 invalid key {key}; truncated {key[:20]}...; sent Authorization: Basic "
        "Ym9iOnBAc3M6dzByZA==; url https://bob:p%40ss%3Aw0rd@embed.example.com/v1?api-key=Q9w8E7r6T5y4; "
        "password p@ss:w0rd; region eu"
    )
    scrubbed = redact.scrub_error(body, [key, base_url, None, ""])
    for leaked in (key, key[:20], "Ym9iOnBAc3M6dzByZA", "p%40ss%3Aw0rd", "p@ss:w0rd", "Q9w8E7r6T5y4"):
        assert leaked not in scrubbed, scrubbed
    assert "embed.example.com/v1" in scrubbed and "region eu" in scrubbed  # the endpoint stays
    assert redact.scrub_error("no secret here", ["sk-abc"]) == "no secret here"


# --------------------------------------------------------------------------- properties

FRAGMENTS = [
    "password",
    "ＰＡＳＳＷＯＲＤ",
    "api_key",
    "token",
    "secret",
    "key",
    "Authorization: ",
    "Bearer ",
    "Basic ",
    "Cookie: ",
    "密码",
    "：",
    ":",
    "=",
    ":-",
    " is ",
    '"',
    "'",
    "`",
    "*",
    "[",
    "]",
    "{",
    "}",
    "$",
    "\n",
    "\\n",
    " ",
    ",",
    "&",
    "?",
    "@",
    "postgres://u:",
    "-----BEGIN RSA PRIVATE KEY-----\n",
    "\n-----END RSA PRIVATE KEY-----",
    "MIIEpAIBAAKCAQEA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v2W3x4",
    "sk-",
    "ghp_",
    "AKIA",
    "SG.",
    "eyJhbGciOiJIUzI1NiJ9.",
    "--password ",
    "mysql -p",
    "aws secret ",
    "Tr0ub4dor&3",
    "A1b2C3d4E5f6G7h8I9j0",
    P,
    "[REDACTED]",
    "\u200b",
    "…",
    "İ",
    "\ud800",
    "\x00",
]
texts = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=10).map("".join)


@_budget
@given(texts)
def test_redaction_is_idempotent_and_only_replaces_spans(text):
    once = redact.redact_secrets(text)
    assert redact.redact_secrets(once) == once
    if once is not text:  # what is left between placeholders is the original's text, in order
        rest = iter(text)
        assert all(any(c == o for o in rest) for c in once.replace(P, ""))


@_budget
@given(st.text())
def test_redaction_never_raises_on_any_string(text):
    assert isinstance(redact.redact_secrets(text), str)
    assert isinstance(redact.scrub_error(text, [text[:20], "https://u:p@h/?k=v"]), str)


def test_huge_and_hostile_inputs_are_handled():
    assert redact.redact_secrets("") == ""
    assert redact.redact_secrets("x\x00\ud800\udfff" * 10) == "x\x00\ud800\udfff" * 10
    huge = "password: hunter2 " + "lorem ipsum " * 200_000  # prose after it: its first word still goes
    assert redact.redact_secrets(huge).startswith(f"password: {P} lorem ipsum")
    assert redact.redact_secrets("-----END RSA PRIVATE KEY-----\n" * 5_000)  # linear, not quadratic


# --------------------------------------------------------------------------- the unicode tables


def test_the_unicode_tables_match_the_running_python():
    """Characters read as "stable" are their own NFKC form and not dropped; every format (Cf)
    character is dropped."""
    stable = redact._MAYBE_CHANGED
    dropped = redact._DROPPED
    for code in range(0x80, 0x30000):
        char = chr(code)
        if unicodedata.category(char) == "Cf":
            assert dropped.match(char), hex(code)
        if not stable.match(char) and not (0xD800 <= code <= 0xDFFF):  # in the stable ranges
            assert unicodedata.normalize("NFKC", char) == char and not dropped.match(char), hex(code)


# --------------------------------------------------------------------------- gitleaks' rules

UPSTREAM = _load("_credentials_upstream", REPO / "tests" / "credentials_upstream.py").CORPUS
RULES_BENCH = _load("_gitleaks_rules", REPO / "bench" / "gitleaks_rules.py")


def test_gitleaks_rules_ship_beside_the_module_with_their_licence_and_version():
    leaks = redact.gitleaks_rules()
    assert leaks is not None and leaks.version == "8.30.1"
    assert len(leaks.rules) >= 200
    notice = redact.GITLEAKS_FILE.with_name("gitleaks_rules.LICENSE").read_text()
    assert "MIT License" in notice and "Zachary Rice" in notice
    data = json.loads(redact.GITLEAKS_FILE.read_text())
    assert "generic-api-key" in data["excluded"] and data["generated_by"] == "bench/gitleaks_rules.py"
    for index in range(len(leaks.rules)):
        assert redact._leak_regex(index).pattern  # every rule compiles


def test_the_upstream_corpus_has_shapes_of_its_own():
    names = [entry.name for entry in UPSTREAM]
    assert len(names) == len(set(names)) >= 40
    ours = {secret for entry in CORPUS for secret in entry.secrets}
    assert all(entry.secrets and not set(entry.secrets) & ours for entry in UPSTREAM)
    assert all(secret in entry.text for entry in UPSTREAM for secret in entry.secrets)


@pytest.mark.parametrize("entry", UPSTREAM, ids=[entry.name for entry in UPSTREAM])
def test_every_secret_of_the_upstream_corpus_is_gone(entry):
    redacted = redact.redact_secrets(entry.text)
    for secret in entry.secrets:
        assert secret not in redacted, redacted
    assert P in redacted


def test_without_the_rule_file_our_own_rules_still_run(monkeypatch, tmp_path):
    monkeypatch.setattr(redact, "GITLEAKS_FILE", tmp_path / "missing.json")
    redact.gitleaks_rules.cache_clear()
    redact._leak_regex.cache_clear()
    redact._allow_regexes.cache_clear()
    try:
        assert redact.gitleaks_rules() is None
        for entry in CORPUS:
            redacted = redact.redact_secrets(entry.text)
            assert not any(secret in redacted for secret in entry.secrets), entry.name
    finally:
        monkeypatch.undo()
        redact.gitleaks_rules.cache_clear()
        redact._leak_regex.cache_clear()
        redact._allow_regexes.cache_clear()
    assert redact.gitleaks_rules() is not None


@pytest.mark.parametrize(
    "text",
    [
        "shopify app: shp" + "at_0123456789abcdef",  # too short for the rule
        "the vault path s.example.internal and o.f.c.i.s.DefaultSqlScriptExecutor",
        "mailgun: key-your-mailgun-key",
        "pulumi up --stack dev && databricks fs ls dbfs:/",
        "commit 3f9a1c2b7d4e5f60718293a4b5c6d7e8f9a0b1c2 (HEAD -> main)",
    ],
)
def test_gitleaks_rules_leave_ordinary_text(text):
    assert redact.redact_secrets(text) == text


def test_gitleaks_rules_stay_linear_on_hostile_text():
    leaks = redact.gitleaks_rules()
    assert leaks is not None
    fillers = ("a", "A1", "-", "0", "=", " ", ".", "a ", "'", "\\n", ": ", "\n")
    worst = 0.0
    for index, rule in enumerate(leaks.rules):
        pattern = redact._leak_regex(index)
        for keyword in rule["keywords"][:2]:
            for filler in fillers:
                for text in (keyword + filler * 2000, (keyword + filler) * 1000, filler * 2000 + keyword):
                    started = time.perf_counter()
                    list(pattern.finditer(text))
                    worst = max(worst, time.perf_counter() - started)
    assert worst < 0.25, worst  # about 5 ms on a developer's machine; backtracking would be seconds


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"\b(p8e-(?i)[a-z0-9]{32})", r"\b(p8e-(?i:[a-z0-9]{32}))"),
        (r"(?i)\b(x[\w[]{3})(?:\s|\z)", r"(?i)\b(x[\w\[]{3})(?:\s|\Z)"),
        (r"a(?i)b|c", r"a(?i:b)|(?i:c)"),
        (r"[[:alnum:]]{4}", r"[a-zA-Z0-9]{4}"),
    ],
)
def test_go_patterns_are_translated_for_python(pattern, expected):
    assert RULES_BENCH.translate(pattern) == expected


@pytest.mark.parametrize(
    ("pattern", "needed"),
    [
        (r"\b(p8e-(?i:[a-z0-9]{32}))(?:[`'\"\s;]|$)", 32),
        (r"(?i)(?:adobe)[ \t\w.-]{0,20}[=:]([a-f0-9]{32})", 32),
        (r"\bshpat_[a-fA-F0-9]{32}\b", 38),  # the prefix and the secret side by side
        (r"((?:hvs\.[\w-]{90,120}|s\.(?i:[a-z0-9]{24})))", 24),  # the shorter branch
        (r"[a-z0-9=_\-]{32}", 0),  # "=" is no token character: no run is sure
        (r"ops_eyJ[a-zA-Z0-9+/]{250,}", 0),
        (r"[A-Z0-9]{6}-?[A-Z0-9]{5}", 0),  # eleven: under the twelve runs start at
        (r"x{1,3}[0-9]{20}", 21),
        (r"(?:ab){20}", 0),  # a repeated group counts on its own: 2
        (r"(unclosed", 0),  # a pattern that does not parse: read everywhere
    ],
)
def test_the_run_a_rule_needs_is_read_off_its_pattern(pattern, needed):
    assert redact._run_needed(pattern) == needed


def test_every_gitleaks_match_holds_the_run_its_rule_is_gated_on():
    """A rule is skipped in a text whose runs of token characters are all shorter than the run its
    pattern needs (:func:`redact._run_needed`): on every corpus text, each match of each rule holds
    such a run, and most rules have one (else the parser changed and the gate is off)."""
    leaks = redact.gitleaks_rules()
    assert leaks is not None
    assert sum(1 for needed in leaks.needs if needed) >= 150
    checked = 0
    for text in [entry.text for entry in CORPUS + UPSTREAM]:
        for index, needed in enumerate(leaks.needs):
            for match in redact._leak_regex(index).finditer(text):
                runs = [len(run) for run in re.findall(r"[A-Za-z0-9_-]+", match.group())]
                assert max(runs, default=0) >= needed, (leaks.rules[index]["id"], match.group())
                checked += bool(needed)
    assert checked >= 30


@pytest.mark.parametrize(
    "text",
    [
        "run nmcli con add ... wifi-sec.psk hunter22 and ldapsearch -w x",
        "ＰＡＳＳＷＯＲＤ：machine, über-pgpass ≠ kty (kty)\n密码 seed",
        "x_mysqldump-login.curlwget",
        "",
    ],
)
def test_a_cue_is_found_in_the_words_as_in_the_text(text):
    """``_Scan.has`` looks for a cue of letters and digits in the text's distinct words joined, any
    other cue in the text, and in a short text every cue in the text: ``cue in low`` either way."""
    cues = ["nmcli", "psk", "hunter22", "ldap", "machine", "pgpass", "kty", "seed", "mysql", "login"]
    cues += ["curlwget", "dumplogin", "redis-cli", "wifi-sec", "über", "密码", "absent", "22 and", "p4x"]
    for whole in (text, text + " lorem-ipsum_dolor.sit(amet)" * 80 + text):
        scan = redact._Scan(redact._View(whole).text, redact.prefix_patterns())
        assert scan.long() == (len(whole) >= 2048)
        for cue in cues:
            assert scan.has(cue) == (cue in scan.low), (cue, len(whole))


def test_labels_without_cjk_words_read_as_with_them():
    """A text with none of the CJK label words' first characters is read with the pattern that
    lacks them: the same labels as the whole pattern finds."""
    words = re.sub(r"\(\?:[^)]*\)", "", redact._LABEL_WORDS_CJK).split("|")
    assert {word[0] for word in words} == set(redact._LABEL_CJK_STARTS)
    texts = [entry.text for entry in CORPUS + UPSTREAM] + ["密码：hunter2 token: abc", "トークン=x pass: y"]
    for text in texts:
        scan = redact._Scan(redact._View(text).text, redact.prefix_patterns())
        expected = [(m.end(), m.group("sep").strip()) for m in redact._LABEL.finditer(scan.low)]
        assert [(at, sep) for _, sep, at, _ in scan.labels()] == expected, text
