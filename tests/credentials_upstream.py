"""A second corpus, written from gitleaks' rules: the shapes its maintainers keep, in the contexts
their rule tests use.

Source: ``config/gitleaks.toml`` of gitleaks 8.30.1 (the rule file shipped as
``project-history-recall/text/gitleaks_rules.json``) and the true-positive examples of its rule
generators (``cmd/generate/config/rules/*.go``: a token alone, ``key = "token"``,
``PROVIDER_TOKEN=token``, a name-keyed ``mailgun: key-...``). Every value is made up here: a body of
the rule's alphabet and length drawn from a seeded random generator, never one from upstream; the
prefixes are written apart from their bodies so that no scanner takes this file for a leak.

None of these shapes is in ``tests/credentials.py``; tests/unit/test_redact.py checks that every
entry comes back without its secret. Run it to print the corpus: ``python tests/credentials_upstream.py``.
"""

from __future__ import annotations

import random
from typing import NamedTuple


class Credential(NamedTuple):
    name: str
    text: str
    secrets: tuple[str, ...]


_RANDOM = random.Random(31)
HEX = "0123456789abcdef"
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
LOWER_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
UPPER_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


def body(alphabet: str, size: int) -> str:
    return "".join(_RANDOM.choice(alphabet) for _ in range(size))


def _entries() -> list[Credential]:
    shopify = "shp" + "at_" + body(HEX, 32)
    shopify_shared = "shp" + "ss_" + body(HEX, 32)
    databricks = "da" + "pi" + body(HEX, 32)
    grafana_sa = "gl" + "sa_" + body(ALNUM, 32) + "_" + body(HEX, 8)
    grafana_cloud = "gl" + "c_" + body(ALNUM, 48)
    pulumi = "pu" + "l-" + body(HEX, 40)
    sentry_user = "sntr" + "yu_" + body(HEX, 64)
    new_relic = "NR" + "AK-" + body(UPPER_ALNUM, 27)
    age = "AGE-SECRET" + "-KEY-1" + body(BECH32, 58)
    alibaba = "LT" + "AI" + body(ALNUM, 20)
    one_password = "A3" + "-" + "-".join(body(UPPER_ALNUM, n) for n in (6, 11, 5, 5, 5))
    planetscale_pw = "pscale" + "_pw_" + body(ALNUM, 43)
    planetscale_tkn = "pscale" + "_tkn_" + body(ALNUM, 43)
    gitlab_deploy = "gl" + "dt-" + body(ALNUM, 20)
    gitlab_ptt = "gl" + "ptt-" + body(HEX, 40)
    gitlab_runner = "gl" + "rt-" + body(ALNUM, 20)
    vault = "hv" + "s." + body(ALNUM + "_-", 100)
    azure = body(ALNUM, 3) + "8" + "Q~" + body(ALNUM + "_~.-", 34)
    do_refresh = "dor" + "_v1_" + body(HEX, 64)
    mailgun = "ke" + "y-" + body(HEX, 32)
    okta = "0" + "0" + body(ALNUM + "_-", 40)
    doppler = "dp" + ".pt." + body(ALNUM, 43)
    linear = "lin" + "_api_" + body(ALNUM, 40)
    postman = "PM" + "AK-" + body(HEX, 24) + "-" + body(HEX, 34)
    rubygems = "ruby" + "gems_" + body(HEX, 48)
    twilio = "S" + "K" + body(HEX, 32)
    heroku = "HR" + "KU-AA" + body(ALNUM + "_-", 58)
    notion = "nt" + "n_" + body("0123456789", 11) + body(ALNUM, 35)
    perplexity = "pp" + "lx-" + body(ALNUM, 48)
    readme = "rd" + "me_" + body(LOWER_ALNUM, 70)
    prefect = "pn" + "u_" + body(ALNUM, 36)
    infracost = "ic" + "o-" + body(ALNUM, 32)
    dynatrace = "dt0" + "c01." + body(UPPER_ALNUM, 24) + "." + body(UPPER_ALNUM, 64)
    harness = "pa" + "t." + body(ALNUM, 22) + "." + body(ALNUM, 24) + "." + body(ALNUM, 20)
    flyio = "fo" + "1_" + body(ALNUM + "_-", 43)
    fastly = body(ALNUM, 32)
    dropbox = body(LOWER_ALNUM, 11) + "AAAAAAAAAA" + body(LOWER_ALNUM, 43)
    atlassian = body(LOWER_ALNUM, 20) + body(HEX, 4)
    openai_new = "sk-" + "proj-" + body(ALNUM, 74) + "T3Blbk" + "FJ" + body(ALNUM, 74)
    return [
        Credential("shopify access token in a title-like line", f"Deploy the app with {shopify}", (shopify,)),
        Credential("shopify shared secret", f'SHOPIFY_SHARED_SECRET="{shopify_shared}"', (shopify_shared,)),
        Credential(
            "databricks token after a flag-less label", f"databricks token {databricks}", (databricks,)
        ),
        Credential("grafana service account token", f"grafana sa: {grafana_sa}", (grafana_sa,)),
        Credential("grafana cloud token", f"export GRAFANA_CLOUD={grafana_cloud}", (grafana_cloud,)),
        Credential("pulumi access token", f"pulumi login with {pulumi} then pulumi up", (pulumi,)),
        Credential("sentry user token", f"sentry-cli --auth {sentry_user}", (sentry_user,)),
        Credential("new relic user key keyed by name", f"new_relic_user = {new_relic}", (new_relic,)),
        Credential("age secret key", f"# created: 2026-01-02\n{age}", (age,)),
        Credential("alibaba access key id", f"aliyun configure set --access-key-id {alibaba}", (alibaba,)),
        Credential("1password secret key", f"Secret Key: {one_password}", (one_password,)),
        Credential("planetscale password", f"DATABASE_URL uses {planetscale_pw}", (planetscale_pw,)),
        Credential("planetscale service token", f"pscale auth with {planetscale_tkn}", (planetscale_tkn,)),
        Credential("gitlab deploy token without a label", f"deploy token {gitlab_deploy}", (gitlab_deploy,)),
        Credential(
            "gitlab pipeline trigger token", f"curl -X POST -F token={gitlab_ptt} -F ref=main", (gitlab_ptt,)
        ),
        Credential(
            "gitlab runner token", f"gitlab-runner register --token {gitlab_runner}", (gitlab_runner,)
        ),
        Credential("vault service token", f"VAULT_TOKEN is {vault} for now", (vault,)),
        Credential("azure ad client secret", f"client secret value: {azure}", (azure,)),
        Credential("digitalocean refresh token", f"refresh: {do_refresh}", (do_refresh,)),
        Credential("mailgun key keyed by name", f"mailgun: {mailgun}", (mailgun,)),
        Credential("okta token keyed by name", f"okta_api = {okta}", (okta,)),
        Credential("doppler token", f"doppler setup --token {doppler}", (doppler,)),
        Credential("linear api key", f"LINEAR_API_KEY={linear}", (linear,)),
        Credential("postman api key", f"postman collection run x --api-key {postman}", (postman,)),
        Credential("rubygems api key", f":rubygems_api_key: {rubygems}", (rubygems,)),
        Credential("twilio api key sid", f"twilio api key {twilio} created", (twilio,)),
        Credential("heroku v2 api key", f"HEROKU_API_KEY {heroku}", (heroku,)),
        Credential("notion integration token", f"notion token {notion}", (notion,)),
        Credential("perplexity api key", f"pplx key {perplexity}", (perplexity,)),
        Credential("readme api key", f"readme: {readme}", (readme,)),
        Credential("prefect api key", f"prefect cloud login -k {prefect}", (prefect,)),
        Credential("infracost api key", f"infracost configure set api_key {infracost}", (infracost,)),
        Credential("dynatrace api token", f"Api-Token {dynatrace}", (dynatrace,)),
        Credential("harness personal access token", f"harness login --api-key {harness}", (harness,)),
        Credential("fly.io access token", f"fly deploy with {flyio}", (flyio,)),
        Credential("fastly token keyed by name", f'fastly_api_token = "{fastly}"', (fastly,)),
        Credential("dropbox long-lived token keyed by name", f"dropbox: {dropbox}", (dropbox,)),
        Credential("atlassian token keyed by product", f"JIRA_API = {atlassian}", (atlassian,)),
        Credential("openai project key of the new shape", f"key {openai_new}", (openai_new,)),
        Credential("several in a .env paste", f"SHOPIFY={shopify}\nPULUMI={pulumi}\n", (shopify, pulumi)),
    ]


CORPUS = _entries()

if __name__ == "__main__":
    for entry in CORPUS:
        print(f"{entry.name}:\n  {entry.text!r}\n")
