"""Credential shapes as they turn up in conversations: the corpus redaction is tested against.

Each entry is a :class:`Credential`: a name, a text as someone would paste it into a chat (or as a
tool printed it), and the substrings that must not survive :func:`text.redact.redact_secrets`. Every
value is fake: made up for this file, realistic in shape (prefix, length, alphabet) and nothing
more. Provider prefixes are written apart from their bodies (``"sk_" + "live_" + ...``) so that no
secret scanner mistakes this file for a leak.

Covered: the twelve forms the issue found leaking (Stripe ``sk_live_``, AWS secret keys,
``AZURE_OPENAI_KEY=<hex>``, ``Authorization: Basic``, URL passwords with ``@``, ``mysql -p``, SendGrid
``SG.``, Slack webhooks, PGP private keys, multi-word ``password:`` values, zero-width-split keys,
full-width labels), the twenty the old redaction caught, common provider tokens, connection
strings, command lines, Chinese/Japanese/Korean labels, and private keys whole, without their END,
and cut by chunking (only the END half, only the middle).

Run it to print the corpus: ``python tests/credentials.py``.
"""

from __future__ import annotations

import base64
import random
from typing import NamedTuple


class Credential(NamedTuple):
    name: str
    text: str
    secrets: tuple[str, ...]


def _b64_lines(head: bytes, size: int, seed: int, width: int = 64) -> list[str]:
    """A key body: ``head`` plus ``size`` random bytes, base64, cut into lines of ``width``."""
    data = head + random.Random(seed).randbytes(size)
    text = base64.b64encode(data).decode("ascii")
    return [text[i : i + width] for i in range(0, len(text), width)]


# A 4096-bit RSA key's body (DER starts 30 82 09 28 02 01 00 02 82 02 01 00: "MIIJKAIBAAKCAgEA").
RSA_4096 = _b64_lines(b"\x30\x82\x09\x28\x02\x01\x00\x02\x82\x02\x01\x00", 2336, seed=4096)
RSA_2048 = _b64_lines(b"\x30\x82\x04\xa4\x02\x01\x00\x02\x82\x01\x01\x00", 1180, seed=2048)
EC_P256 = _b64_lines(b"\x30\x77\x02\x01\x01\x04\x20", 112, seed=256)
PKCS8 = _b64_lines(b"\x30\x82\x04\xbe\x02\x01\x00\x30\x0d\x06\x09\x2a\x86\x48\x86\xf7", 1200, seed=8)
OPENSSH = _b64_lines(b"openssh-key-v1\x00\x00\x00\x00\x04none", 380, seed=22, width=70)
PGP = _b64_lines(b"\x95\x03\xc6\x04\x65\x5e\x1c\x2a\x01\x08\x00", 900, seed=7)

# Provider tokens (fake bodies).
OPENAI = (
    "sk-" + "proj-" + "V0FhHVJWDBt2hWdQZUm14QhoxhLPAbQcEFUV2fsjGHb6HrlEOS47WgjKCu-0xxKhg5QjWV1mKaUyvBPs0jSO2J"
)
OPENAI_OLD = "sk-" + "M0XvqZjxTW3xvboSRt5Mh3dAwVtRMflhbmuaptt0Azn0DNRU"
ANTHROPIC = (
    "sk-"
    + "ant-api03-"
    + "4xdeJg1Kza5KxxGWfvmaQtKnP-VSGVBrYSuIb9OZiFZ3HLKv797TPNbpjava1bMZwIMlvdp5gjTrD8Osj-LnZ5R_j-8UAA"
)
GITHUB = "ghp" + "_JgKLDL36awmUDt8QvwTH6Iuj2OkDCJ23VmCw"
GITHUB_PAT = (
    "github_pat"
    + "_11ABCDEFG0ykTp4EilsS2a_QnjUHc6LZQ9SMDcEVV8bO_hUVXoqmaQzE4ftUvXQIChPnlnhG2BqxLHmAuMe57l9JuO4iI"
)
GITLAB = "glpat" + "-oRGrB5Vpg5C6QsyHZytf"
SLACK_BOT = "xoxb" + "-2718281828-3141592653589-K9kLWBsZFwJgO52MhEBDYxZ4"
SLACK_USER = "xoxp" + "-2718281828-3141592653589-1618033988749-tgCg4zjIccvbkmUAolhChZ9oZGrp27Ym"
SLACK_HOOK = "T01ABCD2EFG/B02HIJK3LMN/" + "aPeAU5moHH5FgrANCaBcnwDD"
GOOGLE = "AIza" + "SyqY6K1Qjah4dXd3eOa1Zcc-a4CgOFfqRgz7I"
HF = "hf" + "_Ud7z14cKuuBNf0gmUBUhWRQdIAUDFbxtBe"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
    "2PQLUD-W1nW4kGeJ-ky88BV8-luteLKWMFmkkBTDijy"
)
STRIPE_LIVE = "sk_" + "live_" + "51HvA0EhexWQ3czyrEvmkXbI8P0GwAESV5nkthBGJd8xncwjxTZVcUOpdxfWEIRH3KU3h"
STRIPE_TEST = "sk_" + "test_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_RESTRICTED = "rk_" + "live_" + "tshRQNG3dhi4wVnX558GkvxT"
TWILIO_SID = "AC" + "2bba82af983eadec108b08c3ce052e96"
TWILIO_TOKEN = "819b8ac3e6dfeb63cc17fd04d5014995"
SENDGRID_ID = "b70CO8W7RQHy2Yp_ptzsJq"
SENDGRID_SECRET = "LOJqu3g9DYpQaxEN_cNljiRkV71kDRuIr2jhTxs_OHK"
SENDGRID = "SG." + SENDGRID_ID + "." + SENDGRID_SECRET
NPM = "npm" + "_XRo5QhgYrZJd6F58LKideRuauiFtEvGjfLg1"
PYPI = (
    "pypi" + "-AgEIcHlwaS5vcmcCJGQ0ZjFlYjAzLTk3MGMtNDk0Yy1hNjNjLWI1ZjNiZmRkZTVjZQACKlszLCJkNTFkNTY3"
    "nudSkpmKog0Qwp-vaQcT7xl2cwC6dT0ctPVnaawqrczLJWImKMG4hEbuUVDPDR"
)
AWS_ID = "AKIA" + "6VGSL0MY485HDU23"
AWS_SECRET = "PbmT1TOkzfR1wKbPXTXx8TTx4XUMGmTtfc6y/xI2"
AWS_TEMP_ID = "ASIA" + "Q3MTL3XZFMG5LJYJ"
AWS_TEMP_SECRET = "5MTL3xzfMg5lJYj/loHI3Yhc1OxT+8QY4+3BMDog"
AWS_SESSION = "FwoGZXIvYXdzEJr//////////wEaDM5hvA0EhexWQ3czyrEvmkXbI8P0GwAESV5nkthBGJd8xncwjxTZVcUOpdxfWE"
AZURE_HEX = "756e61d6b91cda411dfd72f1a3447c74"
AZURE_STORAGE = "aPeAU5moHH5F/grANC/aBcnwDDOOAZvw6d3eK3pxFkhJA5uFyeUhwksU8dSaNrFWv5SRclfFhhqCmzhp59yZk4=="
TELEGRAM = "6031428571:AAH" + "d6-GlThw_ZqyC85Nn7Jf30xIOdZh_NRwhU"
DISCORD_HOOK = "sfSa5Jhl7LiECB7lavfWXTKTiVQ47qsxG72VnY6wGD4tylc-Y3oLOr0GlsP5S_KXv5Zz"
VAULT = "hvs" + ".CAESIjhe3p1g1aKfux6fX1L3dd4u2dDGqt1NvVeIWmQmcVFzbjcoP95wL0rKA53zmg7srxirfu19Ac"
GOOGLE_OAUTH = "ya29" + ".a0AfH6SMt6v3rzKE4RNo88yLVvlwEpgnR74KLO10yZ2ChVIHNaQzlMKYdILjCZO4uEHrIxdNb9Uix"
ETH_KEY = "0x3f0468e068a29301ffdb801678332777c027aaddbfe258b6736c838acdc4bbe9"
DIGITALOCEAN = "dop" + "_v1_2537f2f26ff29c1026be55ac964131b5250f067b74c68bd1ee27518e4bd6e1e4"
GROQ = "gsk" + "_nk2uprePtDxzhelOIxBssMid76gJcqNo6GHm3aZ9jSNPSVHUCVq5"
DRF_TOKEN = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"
SESSION_COOKIE = "8f2k3l4m5n6o7p8q9r0s1t2u3v4w5x6y"
CSRF_COOKIE = "tgCg4zjIccvbkmUAolhChZ9oZGrp27YmBnBZ7HAO"
BASIC_PAIR = "admin:S3cr3tP4ss"
BASIC = base64.b64encode(BASIC_PAIR.encode()).decode()  # YWRtaW46UzNjcjN0UDRzcw==

_ZW = "\u200b"  # zero-width space


def _pem(label: str, lines: list[str], end: bool = True) -> str:
    block = f"-----BEGIN {label}-----\n" + "\n".join(lines) + "\n"
    return block + (f"-----END {label}-----\n" if end else "")


def _corpus() -> list[Credential]:
    c = Credential
    rsa_json = "\\n".join(PKCS8)
    half = len(RSA_4096) // 2
    return [
        # --- provider tokens
        c("openai project key", f"here's my key {OPENAI} can you check why it 401s?", (OPENAI,)),
        c("openai key in .env", f"OPENAI_API_KEY={OPENAI_OLD}\nOPENAI_MODEL=gpt-4o", (OPENAI_OLD,)),
        c("anthropic key in code", f'client = anthropic.Anthropic(api_key="{ANTHROPIC}")', (ANTHROPIC,)),
        c(
            "github classic token in remote url",
            f"git remote set-url origin https://{GITHUB}@github.com/acme/app.git",
            (GITHUB,),
        ),
        c("github fine-grained token", f"export GITHUB_TOKEN={GITHUB_PAT}", (GITHUB_PAT,)),
        c(
            "gitlab token header",
            f'curl --header "PRIVATE-TOKEN: {GITLAB}" "https://gitlab.com/api/v4/projects?owned=true"',
            (GITLAB,),
        ),
        c("slack bot token", f"SLACK_BOT_TOKEN={SLACK_BOT}\nSLACK_CHANNEL=#deploys", (SLACK_BOT,)),
        c("slack user token in prose", f"I used {SLACK_USER} for the admin API and it worked", (SLACK_USER,)),
        c(
            "slack webhook url",
            "curl -X POST -H 'Content-type: application/json' --data '{\"text\":\"deployed\"}' "
            f"https://hooks.slack.com/services/{SLACK_HOOK}",
            ("aPeAU5moHH5FgrANCaBcnwDD",),
        ),
        c(
            "google api key in url",
            f"GET https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key={GOOGLE} 200",
            (GOOGLE,),
        ),
        c("hugging face token", f"huggingface-cli login --token {HF} --add-to-git-credential", (HF,)),
        c("jwt in a bearer header", f"-H 'Authorization: Bearer {JWT}'", (JWT, JWT.split(".")[2])),
        c("jwt in a json response", f'{{"access_token": "{JWT}", "expires_in": 3600}}', (JWT,)),
        c("stripe live secret key", f'stripe.api_key = "{STRIPE_LIVE}"', (STRIPE_LIVE,)),
        c(
            "stripe test key in curl",
            f"curl https://api.stripe.com/v1/charges -u {STRIPE_TEST}:",
            (STRIPE_TEST,),
        ),
        c(
            "stripe restricted key",
            f"the restricted key {STRIPE_RESTRICTED} only reads charges",
            (STRIPE_RESTRICTED,),
        ),
        c(
            "twilio auth token",
            f"TWILIO_ACCOUNT_SID={TWILIO_SID}\nTWILIO_AUTH_TOKEN={TWILIO_TOKEN}\nTWILIO_FROM=+15005550006",
            (TWILIO_TOKEN,),
        ),
        c("sendgrid key in .env", f"SENDGRID_API_KEY={SENDGRID}", (SENDGRID_ID, SENDGRID_SECRET)),
        c(
            "sendgrid key in prose",
            f"SendGrid rejects {SENDGRID} with 403 Forbidden",
            (SENDGRID_ID, SENDGRID_SECRET),
        ),
        c("npm token in .npmrc", f"//registry.npmjs.org/:_authToken={NPM}\nalways-auth=true", (NPM,)),
        c(
            "pypi token in .pypirc",
            f"[pypi]\n  username = __token__\n  password = {PYPI}\n",
            (PYPI, PYPI[5:60]),
        ),
        c(
            "azure openai key",
            f"AZURE_OPENAI_ENDPOINT=https://acme.openai.azure.com/\nAZURE_OPENAI_KEY={AZURE_HEX}",
            (AZURE_HEX,),
        ),
        c(
            "azure api-key header",
            f'curl "$AZURE_OPENAI_ENDPOINT/openai/deployments/gpt4/chat/completions" '
            f'-H "api-key: {AZURE_HEX}"',
            (AZURE_HEX,),
        ),
        c(
            "azure storage connection string",
            "DefaultEndpointsProtocol=https;AccountName=acmestore;"
            f"AccountKey={AZURE_STORAGE};EndpointSuffix=core.windows.net",
            (AZURE_STORAGE, AZURE_STORAGE[:40]),
        ),
        c(
            "aws keys in .env",
            f"AWS_ACCESS_KEY_ID={AWS_ID}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\nAWS_REGION=eu-west-1",
            (AWS_ID, AWS_SECRET),
        ),
        c(
            "aws configure prompts",
            f"$ aws configure\nAWS Access Key ID [None]: {AWS_ID}\n"
            f"AWS Secret Access Key [None]: {AWS_SECRET}\nDefault region name [None]: us-east-1",
            (AWS_ID, AWS_SECRET),
        ),
        c(
            "aws credentials csv",
            f"User name,Access key ID,Secret access key\ndeploy-bot,{AWS_ID},{AWS_SECRET}",
            (AWS_ID, AWS_SECRET),
        ),
        c(
            "aws sts json",
            f'{{"Credentials": {{"AccessKeyId": "{AWS_TEMP_ID}", "SecretAccessKey": "{AWS_TEMP_SECRET}", '
            f'"SessionToken": "{AWS_SESSION}", "Expiration": "2024-06-11T12:00:00Z"}}}}',
            (AWS_TEMP_ID, AWS_TEMP_SECRET, AWS_SESSION),
        ),
        c(
            "gcp service account json",
            '{\n  "type": "service_account",\n  "project_id": "acme-prod",\n'
            '  "private_key_id": "0c3e9f2a81d47b65e0a9c3f1d2b84e7a6f5c1d08",\n'
            f'  "private_key": "-----BEGIN PRIVATE KEY-----\\n{rsa_json}\\n-----END PRIVATE KEY-----\\n",\n'
            '  "client_email": "deployer@acme-prod.iam.gserviceaccount.com"\n}',
            tuple(PKCS8),
        ),
        c("telegram bot token", f"TELEGRAM_BOT_TOKEN={TELEGRAM}", (TELEGRAM.split(":")[1],)),
        c(
            "discord webhook url",
            f"webhook: https://discord.com/api/webhooks/1184392014567890123/{DISCORD_HOOK}",
            (DISCORD_HOOK,),
        ),
        c("vault token", f"export VAULT_TOKEN={VAULT}\nvault kv get secret/app", (VAULT,)),
        c(
            "oauth access token in query string",
            f"GET /v1/userinfo?access_token={GOOGLE_OAUTH}&alt=json HTTP/1.1",
            (GOOGLE_OAUTH,),
        ),
        c("ethereum private key", f'PRIVATE_KEY="{ETH_KEY}"', (ETH_KEY[2:],)),
        c("digitalocean and groq tokens", f"DO token {DIGITALOCEAN}, groq {GROQ}", (DIGITALOCEAN, GROQ)),
        c("django rest framework token header", f"Authorization: Token {DRF_TOKEN}", (DRF_TOKEN,)),
        # --- URLs and connection strings
        c(
            "postgres url with @ in the password",
            "DATABASE_URL=postgres://app_user:p@ss@w0rd!@db.internal.example:5432/app",
            ("p@ss@w0rd!", "ss@w0rd"),
        ),
        c(
            "mongodb+srv url",
            "mongodb+srv://admin:Xk29vLq7mZ@cluster0.ab1cd.mongodb.net/prod?retryWrites=true&w=majority",
            ("Xk29vLq7mZ",),
        ),
        c(
            "redis url with password only",
            "REDIS_URL=redis://:Str0ngRedisPass@cache.internal:6379/0",
            ("Str0ngRedisPass",),
        ),
        c(
            "https url with user and password",
            "git clone https://deploy:Tr0ub4dor&3@git.internal.example/acme/app.git",
            ("Tr0ub4dor&3",),
        ),
        c(
            "jdbc sql server password",
            "jdbc:sqlserver://db.internal:1433;databaseName=app;user=sa;password=Sql$erver2019!;encrypt=true",
            ("Sql$erver2019!",),
        ),
        c(
            "jdbc mysql query password",
            "spring.datasource.url=jdbc:mysql://localhost:3306/app?user=root&password=MyR00tPass&useSSL=false",
            ("MyR00tPass",),
        ),
        c(
            "python connect keyword",
            'conn = psycopg2.connect(host="db", user="app", password="Pg!Secret42", dbname="app")',
            ("Pg!Secret42",),
        ),
        # --- labelled values
        c(
            ".env lines",
            "DEBUG=false\nSECRET_KEY=django-insecure-7x!k2m#p9q$w4e8r1t6y3u0i5o\nDB_PASSWORD=Summer2024!\n",
            ("django-insecure-7x!k2m#p9q$w4e8r1t6y3u0i5o", "Summer2024!"),
        ),
        c(
            "yaml multi-word password",
            "database:\n  user: app\n  password: correct horse battery staple\n  host: db.internal\n",
            ("correct horse battery staple", "horse battery staple", "battery staple", "staple"),
        ),
        c(
            "multi-word password in prose",
            "The guest wifi password: purple monkey dishwasher (rotates monthly)",
            ("purple monkey dishwasher", "monkey dishwasher", "dishwasher"),
        ),
        c(
            "json api_key",
            '{"api_key": "a1b2c3d4e5f6a7b8c9d0e1f2", "model": "embed-small"}',
            ("a1b2c3d4e5f6a7b8c9d0e1f2",),
        ),
        c(
            "kubernetes secret data",
            "data:\n  username: YWRtaW4=\n  password: cGFzc3dvcmQxMjM0NTY=\n",
            ("cGFzc3dvcmQxMjM0NTY=",),
        ),
        c("password is", "fyi the staging db password is Tr0ub4dor&3, don't share it", ("Tr0ub4dor&3",)),
        c(
            "oauth client secret",
            "client_secret: 9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c",
            ("9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c",),
        ),
        c(
            "secret key in prose",
            "the secret key: 7f8E9d0C1b2A3f4E5d6C, keep it safe",
            ("7f8E9d0C1b2A3f4E5d6C",),
        ),
        c("credentials pair", "credentials: deploy:Dep10y!Pass", ("Dep10y!Pass",)),
        c("x-api-key header", f"-H 'x-api-key: {DRF_TOKEN}' -H 'accept: application/json'", (DRF_TOKEN,)),
        c(
            "heroku api key uuid",
            "HEROKU_API_KEY=01234567-89ab-4cde-8f01-23456789abcd",
            ("01234567-89ab-4cde-8f01-23456789abcd",),
        ),
        c(
            "netrc",
            "machine api.heroku.com\n  login me@example.com\n"
            "  password 5f1e3c9a-7b2d-4e8f-a6c0-d9b8e7f6a5c4\n",
            ("5f1e3c9a-7b2d-4e8f-a6c0-d9b8e7f6a5c4",),
        ),
        # --- HTTP authorization
        c("authorization basic", f"Authorization: Basic {BASIC}\nAccept: */*", (BASIC, BASIC.rstrip("="))),
        c(
            "authorization bearer opaque",
            "-H 'Authorization: Bearer 8f3c2a9d7e1b4f6a0c5d2e8b9a7f3c1d'",
            ("8f3c2a9d7e1b4f6a0c5d2e8b9a7f3c1d",),
        ),
        c(
            "cookie header",
            f"Cookie: sessionid={SESSION_COOKIE}; csrftoken={CSRF_COOKIE}",
            (SESSION_COOKIE, CSRF_COOKIE),
        ),
        # --- command lines
        c(
            "curl -u user:password",
            "curl -u admin:S3cr3tP4ss https://jenkins.internal/api/json",
            ("S3cr3tP4ss",),
        ),
        c(
            "docker login -p",
            "docker login -u deploy -p Dck3rHubP4ss! registry.example.com",
            ("Dck3rHubP4ss!",),
        ),
        c(
            "mysql -p",
            "mysql -h db.internal -u root -pR00tP@ssw0rd app_production < dump.sql",
            ("R00tP@ssw0rd",),
        ),
        c("mysql -p quoted", "mysqldump -uroot -p'Dump#Pass99' shop > shop.sql", ("Dump#Pass99",)),
        c(
            "psql with PGPASSWORD",
            "PGPASSWORD=pgS3cret99 psql -h localhost -U postgres -d app",
            ("pgS3cret99",),
        ),
        c(
            "--password flag",
            "mongosh --username admin --password 'Mong0Pass!' --host mongo.internal",
            ("Mong0Pass!",),
        ),
        c(
            "wget --password=",
            "wget --user=ftpuser --password=FtpS3cret! ftp://files.example.com/data.zip",
            ("FtpS3cret!",),
        ),
        c("redis-cli -a", "redis-cli -h cache.internal -a R3disAuthPass ping", ("R3disAuthPass",)),
        c("sshpass -p", "sshpass -p 'Ssh!Pass2024' ssh deploy@10.0.0.5 uptime", ("Ssh!Pass2024",)),
        c(
            "openssl -passin",
            "openssl rsa -in key.pem -passin pass:Opn$slPass1 -out plain.pem",
            ("Opn$slPass1",),
        ),
        c("requests auth tuple", "r = requests.get(url, auth=('admin', 'Adm1nPass!'))", ("Adm1nPass!",)),
        # --- other languages and obfuscation
        c("chinese password label", "数据库密码：Zh0ngWen#2024，用户名：root", ("Zh0ngWen#2024",)),
        c("chinese key label", "密钥=abcdef123456SECRETxyz", ("abcdef123456SECRETxyz",)),
        c("chinese password is", "测试环境的密码是 ceshi@8899 别外传", ("ceshi@8899",)),
        c("chinese access-token label", "访问令牌：AbCdEf1234567890XyZ", ("AbCdEf1234567890XyZ",)),
        c("chinese passphrase label", "服务器口令是 Kouling#88，明天换", ("Kouling#88",)),
        c("japanese password label", "パスワード：himitsu123", ("himitsu123",)),
        c("korean password label", "비밀번호: Bimil!2024", ("Bimil!2024",)),
        c("full-width label", "ｐａｓｓｗｏｒｄ：Fu11W1dth!Pass", ("Fu11W1dth!Pass",)),
        c("full-width label and value", "ｐａｓｓｗｏｒｄ：ｈｕｎｔｅｒ２ｚｚ", ("ｈｕｎｔｅｒ２ｚｚ",)),
        c(
            "key split by zero-width space",
            f"try this one: {OPENAI[:30]}{_ZW}{OPENAI[30:]}",
            (OPENAI[:30], OPENAI[30:], OPENAI[3:30]),
        ),
        c(
            "label split by zero-width joiner",
            "pass\u200dword: Zw1Join!Secret",
            ("Zw1Join!Secret",),
        ),
        c(
            "key split across two lines",
            f"OPENAI_API_KEY={OPENAI[:60]}\n{OPENAI[60:]}\n\nthen restart the server",
            (OPENAI[:60], OPENAI[60:]),
        ),
        # --- private keys
        c(
            "rsa private key",
            "key.pem:\n" + _pem("RSA PRIVATE KEY", RSA_2048) + "\nis that the right format?",
            tuple(RSA_2048),
        ),
        c("ec private key", _pem("EC PRIVATE KEY", EC_P256), tuple(EC_P256)),
        c("pkcs8 private key", _pem("PRIVATE KEY", PKCS8), tuple(PKCS8)),
        c(
            "openssh private key",
            "~/.ssh/id_ed25519:\n" + _pem("OPENSSH PRIVATE KEY", OPENSSH),
            tuple(OPENSSH),
        ),
        c(
            "pgp private key block",
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\nComment: deploy@acme\n\n" + "\n".join(PGP) + "\n=Xq7T\n"
            "-----END PGP PRIVATE KEY BLOCK-----",
            tuple(PGP),
        ),
        c(
            "rsa private key without its end",
            "I pasted it like this:\n" + _pem("RSA PRIVATE KEY", RSA_4096[:20], end=False),
            tuple(RSA_4096[:20]),
        ),
        c(
            "pgp private key without its end",
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + "\n".join(PGP[:8]),
            tuple(PGP[:8]),
        ),
        c(
            "4096-bit key, only the end half (a chunk)",
            "\n".join(RSA_4096[half:]) + "\n-----END RSA PRIVATE KEY-----\n\nnow ssh says: invalid format",
            tuple(RSA_4096[half:]),
        ),
        c(
            "4096-bit key, only the middle (a chunk)",
            "\n".join(RSA_4096[10:30]),
            tuple(RSA_4096[10:30]),
        ),
    ]


CORPUS: list[Credential] = _corpus()

if __name__ == "__main__":
    for entry in CORPUS:
        print(f"## {entry.name}\n{entry.text}\n")
    print(f"{len(CORPUS)} entries")
