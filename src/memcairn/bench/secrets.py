"""``memcairn bench secrets``: shapes of secrets run through the admission code, and innocent look-alikes.

Each shape is text a hook event may carry (a command, its output, a config file, a sentence); it goes through
``capture.privacy.scrub``, what ``capture.admission.admit`` applies to every string of every event (the local
worker's queue, the importer and the team server's ingest alike). A shape is *redacted* when its secret is gone
from the result, *stored* otherwise. A look-alike (``KEY_COUNT=3``, a git sha) must come back unchanged: any
change is a false positive.

Every secret here is fake and assembled from parts at run time, so no scanner takes this file for a leak.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from memcairn.wire.privacy.scrubbing import scrub

_MIXED = "a1B2c3D4e5F6g7H8i9J0kLmN" * 20
_HEX = "3f786850e387550fdab836ed7e6dc881" * 4
_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l".upper() * 2


def _m(n: int, seed: str = "") -> str:
    """A token-like run of letters and digits."""
    return (seed + _MIXED)[:n]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@dataclass(frozen=True)
class Shape:
    family: str  # where it comes from: the second campaign, the first, a provider's format
    label: str
    text: str
    secret: str  # what must not survive


def _pem(kind: str) -> str:
    head = "-----BEGIN " + kind + "PRIVATE KEY-----"
    return head + "\n" + _m(64, "MIIEow") + "\n" + _m(40) + "==\n-----END " + kind + "PRIVATE KEY-----"


def shapes() -> list[Shape]:
    """The catalogue: the 17 shapes of the second campaign, the first campaign's, and providers' token formats."""
    pw, tok = "Tr0ub4" + "dor9x", _m(32, "Zq8")
    new = "campaign 2"
    old = "campaign 1"
    provider = "provider"
    pem_body = _m(64, "MIIEow")
    return [
        # -- the second campaign: the 17 shapes that were stored --
        Shape(new, "env STRIPE_KEY=", "STRIPE_KEY=" + _m(28, "Xq7"), _m(28, "Xq7")),
        Shape(new, "env SENDGRID_KEY=", "export SENDGRID_KEY=" + _m(40, "Zr4"), _m(40, "Zr4")),
        Shape(new, "env JWT_SIGNING=", "JWT_SIGNING=" + _m(30, "Pk9"), _m(30, "Pk9")),
        Shape(new, "prose: my db password is X", "fyi my db password is " + pw + ", rotate it", pw),
        Shape(new, "prose: the password is X", "the password is hunter2", "hunter2"),
        Shape(new, "YAML password, letters only", "db:\n  user: app\n  password: " + "Swordfish" + "\n",
              "Swordfish"),
        Shape(new, "YAML password, short letters", "database:\n  password: " + "hunter" + "\n", "hunter"),
        Shape(new, "echo X | docker login --password-stdin",
              "echo " + pw + " | docker login -u ci --password-stdin ghcr.io", pw),
        Shape(new, ".pgpass line", "db.internal:5432:app:appuser:" + pw + "\n", pw),
        Shape(new, "AGE-SECRET-KEY-1", "AGE-SECRET-KEY-1" + _BECH32[:58], _BECH32[:58]),
        Shape(new, "Twilio SK", "TWILIO_API=" + "SK" + _HEX[:32], "SK" + _HEX[:32]),
        Shape(new, "DigitalOcean dop_v1_", "doctl auth init -t " + "dop_v1_" + _HEX[:64], _HEX[:64]),
        Shape(new, "secret split across two JSON fields",
              json.dumps({"Parameter": {"Name": "/prod/db/password", "Type": "SecureString", "Value": pw}}), pw),
        Shape(new, "GCP private_key_id",
              json.dumps({"type": "service_account", "private_key_id": _HEX[1:41]}, indent=2), _HEX[1:41]),
        Shape(new, "htpasswd apr1", "admin:" + "$apr1$" + "r31XyZ9a$" + _m(22, "Hq"), _m(22, "Hq")),
        Shape(new, "htpasswd bcrypt", "deploy:" + "$2y$" + "05$" + _m(53, "Bc"), _m(53, "Bc")),
        Shape(new, "password=hunter2 (short, in a line)", "connect with password=hunter2 then retry", "hunter2"),
        Shape(new, "password: hunter2 (short)", "password: hunter2", "hunter2"),
        # -- the first campaign --
        Shape(old, "PEM private key", "key:\n" + _pem("RSA "), pem_body),
        Shape(old, "OpenSSH private key", _pem("OPENSSH "), pem_body),
        Shape(old, "JSON password", json.dumps({"user": "admin", "password": pw}), pw),
        Shape(old, "escaped JSON in a JSON string",
              '"SecretString": "{\\"username\\":\\"admin\\",\\"password\\":\\"' + pw + '\\"}"', pw),
        Shape(old, "Authorization: Bearer", "curl -H 'Authorization: Bearer " + tok + "' https://api", tok),
        Shape(old, "Authorization: token", "Authorization: token " + tok, tok),
        Shape(old, "Authorization: Basic", "Authorization: Basic " + _b64("admin:" + pw), _b64("admin:" + pw)),
        Shape(old, "curl -u user:pass", "curl -s -u admin:" + pw + " https://example.com", pw),
        Shape(old, "docker login --password", "docker login -u me --password " + pw + " ghcr.io", pw),
        Shape(old, "mysql -pSECRET", "mysql -uroot -p" + pw + " -e 'select 1' app", pw),
        Shape(old, "sshpass -p", "sshpass -p '" + pw + "' ssh deploy@host", pw),
        Shape(old, "CLI --token", "vercel deploy --prod --token " + tok, tok),
        Shape(old, "PGPASSWORD=", "PGPASSWORD=" + "hunter2" + " psql -h db", "hunter2"),
        Shape(old, "export DB_PASSWORD=", "export DB_PASSWORD=" + pw, pw),
        Shape(old, ".netrc", "machine api.example.com login alice password " + pw, pw),
        Shape(old, "docker config auth", '{"auths": {"r.example.com": {"auth": "' + _b64("u:" + pw) + '"}}}',
              _b64("u:" + pw)),
        Shape(old, "Maven <password>", "<server><id>central</id><password>" + pw + "</password></server>", pw),
        Shape(old, "Cookie header", "Cookie: sessionid=" + tok + "; theme=dark", tok),
        Shape(old, "kubeconfig client-key-data", "client-key-data: " + _b64(_pem("")), _b64(_pem(""))[20:60]),
        Shape(old, "base64 of a GitHub token", "blob: " + _b64("ghp_" + _m(36)), _b64("ghp_" + _m(36))),
        Shape(old, "env list name/value", json.dumps([{"name": "API_TOKEN", "value": tok}]), tok),
        # -- providers' token formats --
        Shape(provider, "AWS access key id", "aws_access_key_id = " + "AKIA" + "IOSFODNN7QUOKKA1", "IOSFODNN7QUOKKA1"),
        Shape(provider, "AWS secret access key",
              "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCY" + "QUOKKAKEY0",
              "bPxRfiCYQUOKKAKEY0"),
        Shape(provider, "GitHub classic token", "GH_TOKEN=" + "ghp_" + _m(36), _m(36)),
        Shape(provider, "GitHub fine-grained token", "github_pat_" + "11ABCDEFG0_" + _m(59), _m(59)),
        Shape(provider, "GitLab personal token", "glpat-" + _m(20), _m(20)),
        Shape(provider, "Slack bot token", "xoxb-" + "123456789012-1234567890123-" + _m(24), _m(24)),
        Shape(provider, "Slack webhook", "https://hooks.slack.com/services/" + "T0000AB12/B0000CD34/" + _m(24),
              _m(24)),
        Shape(provider, "Stripe secret key", "stripe.api_key = 'sk_" + "live_" + _m(24) + "'", _m(24)),
        Shape(provider, "Stripe webhook secret", "whsec_" + _m(32), _m(32)),
        Shape(provider, "Google API key", "key=" + "AIza" + "Sy" + _m(33), "Sy" + _m(33)),
        Shape(provider, "Azure storage connection string",
              "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" + _m(86) + "==", _m(86)),
        Shape(provider, "OpenAI project key", "OPENAI_API_KEY=" + "sk-" + "proj-" + _m(48), _m(48)),
        Shape(provider, "Anthropic key", "sk-ant-" + "api03-" + _m(40), _m(40)),
        Shape(provider, "JWT", "token " + "eyJ" + "hbGciOiJIUzI1NiJ9." + "eyJ" + "zdWIiOiIxMjM0In0." + _m(43),
              _m(43)),
        Shape(provider, "npm token", "//registry.npmjs.org/:_authToken=" + "npm_" + _m(36), _m(36)),
        Shape(provider, "Hugging Face token", "hf_" + _m(34), _m(34)),
        Shape(provider, "SendGrid key", "SG." + _m(22) + "." + _m(43), _m(43)),
        Shape(provider, "PyPI token", "pypi-" + "AgEIcHlwaS5vcmc" + _m(70), _m(70)),
        Shape(provider, "postgres URL with password", "DATABASE_URL=postgres://admin:" + pw + "@db:5432/app", pw),
        Shape(provider, "redis URL with password", "redis://:" + pw + "@cache:6379/0", pw),
        Shape(provider, "basic-auth https URL", "git clone https://bot:" + pw + "@git.example.com/r.git", pw),
        Shape(provider, "Shopify access token", "shpat_" + _HEX[:32], _HEX[:32]),
        Shape(provider, "Databricks token", "dapi" + _HEX[:32], _HEX[:32]),
        Shape(provider, "Linear API key", "lin_api_" + _m(40), _m(40)),
        Shape(provider, "Postman API key", "PMAK-" + _HEX[:24] + "-" + _HEX[:34], _HEX[:34]),
        Shape(provider, "Grafana service account token", "glsa_" + _m(32) + "_" + _HEX[:8], _m(32)),
        Shape(provider, "Doppler token", "dp.st." + _m(40), _m(40)),
        Shape(provider, "Pulumi token", "pul-" + _HEX[:40], _HEX[:40]),
        Shape(provider, "Mailgun key", "key-" + _HEX[:32], _HEX[:32]),
    ]


# Text that names or resembles a secret and holds none: each must come back unchanged.
LOOKALIKES: tuple[str, ...] = (
    "password_field = form.fields['password']",
    "KEY_COUNT=3",
    "the token budget is 8000 per turn",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "session_id=550e8400-e29b-41d4-a716-446655440000",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "max_tokens = 4096",
    'sort_key = "created_at"',
    "PRIMARY_KEY=id",
    "SSH_KEY=~/.ssh/id_rsa",
    "CACHE_KEY=user-profile",
    "the token is expired, log in again",
    "the password is required",
    "the password is sha256-hashed",
    "set the token to use in the header",
    "password: str",
    "    password: SecretStr",
    "def login(user: str, password: str) -> None:",
    'api_key = os.environ["OPENAI_API_KEY"]',
    "echo $REGISTRY_TOKEN | docker login -u ci --password-stdin ghcr.io",
    "cat token.txt | docker login --password-stdin ghcr.io",
    "--- PASS: TestParseArgs/empty_input (0.00s)",
    "if (token === '--json') {",
    "if (!tableToken || tableToken === '*') {",
    "  --pass: #22c55e;",
    "Token: [REDACTED:github_token]",
    "mac 00:1a:2b:3c:4d:5e at 12:30:00",
    "a.py:12:5: E501 line too long",
    "SKIP_TESTS=1",
    "key-value store",
    "the api key is stored in the vault",
    "password: {{ vault_db_password }}",
    "the token is JWT-based and the password is None",
    'publicKey: "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1L"',
)


def _leaked(secret: str, out: Any) -> bool:
    return secret in (out if isinstance(out, str) else json.dumps(out))


def _placeholders(out: str) -> str:
    return ", ".join(sorted(set(re.findall(r"\[REDACTED:([a-z0-9_]+)\]", out)))) or "-"


def run() -> dict[str, Any]:
    """Rows per shape (redacted or stored, by which rule), per look-alike changed, and the totals."""
    rows: list[dict[str, Any]] = []
    for shape in shapes():
        started = time.perf_counter()
        out = scrub(shape.text)
        spent = time.perf_counter() - started
        stored = _leaked(shape.secret, out)
        rows.append({"family": shape.family, "shape": shape.label, "result": "STORED" if stored else "redacted",
                     "as": _placeholders(out), "us": round(spent * 1e6)})
    false_positives = [{"look-alike": text, "became": scrub(text)} for text in LOOKALIKES if scrub(text) != text]
    stored_count = sum(1 for row in rows if row["result"] == "STORED")
    return {"shapes": rows, "false_positives": false_positives,
            "totals": {"shapes": len(rows), "redacted": len(rows) - stored_count, "stored": stored_count,
                       "lookalikes": len(LOOKALIKES), "false_positives": len(false_positives)}}
