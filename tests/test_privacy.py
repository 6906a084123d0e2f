"""Privacy rules: <private> removal, secret redaction and scrubbing of whole events.

Every fake secret is assembled from pieces so this file never holds a string shaped like a real credential."""

from __future__ import annotations

import random
from collections import namedtuple

import pytest
from secret_examples import AWS_SECRET, AZURE_KEY, EXAMPLES, JWT, mixed

from memcairn.wire.privacy.private_tags import is_entirely_private, strip_private
from memcairn.wire.privacy.redaction import redact_secrets, redact_with_counts
from memcairn.wire.privacy.rules import PATTERN_NAMES, placeholder
from memcairn.wire.privacy.scrubbing import scrub


@pytest.mark.parametrize(("name", "text", "secret"), EXAMPLES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(EXAMPLES)])
def test_each_pattern_redacts_its_example(name: str, text: str, secret: str) -> None:
    redacted, counts = redact_with_counts(text)
    assert counts.get(name, 0) >= 1, (redacted, counts)
    assert placeholder(name) in redacted
    assert secret not in redacted


def test_pattern_names_are_many_unique_and_all_exercised() -> None:
    assert len(PATTERN_NAMES) >= 15
    assert len(set(PATTERN_NAMES)) == len(PATTERN_NAMES)
    assert set(PATTERN_NAMES) >= {name for name, _, _ in EXAMPLES}  # the rest: test_privacy_shapes.py


@pytest.mark.parametrize("name", PATTERN_NAMES)
def test_placeholders_are_left_alone(name: str) -> None:
    marker = placeholder(name)
    assert marker == f"[REDACTED:{name}]"
    for text in (marker, f"password = {marker}", f'"token": "{marker}"', f"Bearer {marker}", f"https://u:{marker}@h"):
        assert redact_with_counts(text) == (text, {})


def test_context_around_a_secret_is_kept() -> None:
    assert redact_secrets("postgres://admin:" + "S3cr3tPa55" + "@db.internal:5432/app") == (
        "postgres://admin:[REDACTED:url_credentials]@db.internal:5432/app"
    )
    assert redact_secrets("Authorization: Bearer " + mixed(32)) == "Authorization: Bearer [REDACTED:bearer_token]"
    assert redact_secrets("https://hooks.slack.com/services/" + "T0/B0/" + mixed(24)) == (
        "https://hooks.slack.com/services/[REDACTED:slack_webhook]"
    )
    assert redact_secrets("AccountName=acct;AccountKey=" + AZURE_KEY + ";EndpointSuffix=x") == (
        "AccountName=acct;AccountKey=[REDACTED:azure_storage_key];EndpointSuffix=x"
    )
    assert redact_secrets("password = '" + "hunter2" + "'  # old") == "password = '[REDACTED:secret_assignment]'  # old"
    assert redact_secrets("export DB_PASSWORD=" + "changeme") == "export DB_PASSWORD=[REDACTED:secret_assignment]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password: str = 'abc'", "password: str = '[REDACTED:secret_assignment]'"),
        ("api_key: str | None = 'abc'", "api_key: str | None = '[REDACTED:secret_assignment]'"),
        (
            "X-Api-Key: abcd1234efgh, password = 'xyz'",
            "X-Api-Key: [REDACTED:secret_assignment], password = '[REDACTED:secret_assignment]'",
        ),
        ('cmd = "mysql --password=hunter2hunter2 db"', 'cmd = "mysql --password=[REDACTED:secret_assignment] db"'),
        ("--set=secret=abc123456", "--set=secret=[REDACTED:secret_assignment]"),
        ("GET /cb?access_token=q1w2e3r4t5&state=x", "GET /cb?access_token=[REDACTED:secret_assignment]&state=x"),
        ("db_password=changemeplease", "db_password=[REDACTED:secret_assignment]"),
        ("  password: Changeme", "  password: Changeme"),
    ],
)
def test_assignment_readings(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


def test_specific_types_win_over_generic_rules() -> None:
    redacted, counts = redact_with_counts('api_key = "' + "sk-ant-" + "api03-" + mixed(40) + '"')
    assert redacted == 'api_key = "[REDACTED:anthropic_api_key]"'
    assert counts == {"anthropic_api_key": 1}
    redacted, counts = redact_with_counts("Authorization: Bearer " + JWT)
    assert redacted == "Authorization: Bearer [REDACTED:jwt]"
    assert counts == {"jwt": 1}


def test_counts_add_up_per_type() -> None:
    text = "\n".join(["ghp_" + mixed(36), "ghs_" + mixed(36), "AKIA" + "IOSFODNN7EXAMPLE", "nothing here"])
    redacted, counts = redact_with_counts(text)
    assert counts == {"github_token": 2, "aws_access_key": 1}
    assert redacted.endswith("nothing here")


NEGATIVES = [
    "password = getpass()",
    "password = getpass.getpass('Password: ')",
    "token = None",
    "token_count = 5",
    "max_tokens = 4096",
    "secret = 42",
    'api_key = os.environ["OPENAI_API_KEY"]',
    'token = request.headers.get("Authorization")',
    "password_hash = hash_password(raw_password)",
    "secret_key = get_random_secret_key()",
    "token = generate_token",
    "token = self._token",
    "    token = refresh_token",
    "client = Client(api_key=settings_api_key)",
    'headers = {"Authorization": f"Bearer {token}"}',
    'headers = {"Authorization": "Bearer " + token}',
    "curl -H \"Authorization: Bearer $API_TOKEN\" https://api",
    'password = "${DB_PASSWORD}"',
    "password: {{ vault_password }}",
    "password: SecretStr",
    "def login(user: str, password: str) -> None:",
    "token: Optional[str] = None",
    "    api_key: str | None = None",
    "interface Session { token: string; expiresAt: number }",
    '"token": null, "password": ""',
    "access_token_url = 'https://example.com/oauth/token'",
    "for token in tokens:",
    "if not token: return",
    "bypass = 'abcdefghij'",
    "PWD=/home/user/project",
    "isPrivate = True",
    "import secrets",
    "The bearer of this letter is a friend.",
    "use sk-learn estimators",
    "sk-circle-bounce-delay-animation",
    "task-ant-runner-configuration",
    "AKIA is the prefix of an access key id",
    "docker run -u 1000:1000 image",
    "git clone ssh://git@github.com/org/repo.git",
    "git@github.com:org/repo.git",
    "http://localhost:8080/path?x=1",
    "http://[::1]:8080/",
    "mailto:someone@example.com",
    "Authorization: Basic realm",
    "eyJ is how base64 JSON starts",
    "-----BEGIN CERTIFICATE-----",
    "<privateer>not a tag</privateer>",
    "the machine learning password reset flow",
    "by default password length is 12",
    "<password>${env.MAVEN_PASSWORD}</password>",
    '"auth": "oauth2"',
    "Cookie: none yet, the banner comes first",
    '"cookie": "none yet"',
    "<password>\n  ${env.MAVEN_PASSWORD}\n</password>",
    "the cookie banner fires before consent",
]


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_code_is_not_redacted(text: str) -> None:
    assert redact_with_counts(text) == (text, {})


def test_a_realistic_source_file_is_untouched() -> None:
    source = '''import getpass
import os

from pydantic import SecretStr


class Settings:
    password: SecretStr
    token: str | None = None
    token_count: int = 5
    max_tokens = 4096

    def login(self, password: str | None = None) -> str:
        password = password or getpass.getpass()
        token = self.client.authenticate(user=self.user, password=password)
        self.token = token
        headers = {"Authorization": f"Bearer {token}"}
        api_key = os.environ.get("API_KEY", "")
        return self.request("GET", "/me", headers=headers, api_key=api_key)
'''
    assert redact_secrets(source) == source


# ------------------------------------------------------------------------------------------------------------------
# <private> tags
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no tags at all", "no tags at all"),
        ("a <private>x</private> b", "a b"),
        ("key=<private>v</private>;", "key=;"),
        ("one <private>x</private> two <private>y</private> three", "one two three"),
        ("p1\n\n<private>line 1\nline 2\n</private>\n\np2", "p1\n\np2"),
        ("a\n    <private>x</private>\n    b", "a\n    b"),
        ("<PRIVATE>x</Private>  hi", "hi"),
        ("hi < private >x</ PRIVATE > there", "hi there"),
        ('<private reason="keys">x</private>kept', "kept"),
        ("keep this <private>but not\nany of this", "keep this"),
        ("a<private>1<private>2</private>3</private>b", "ab"),
        ("a <private>1 <private>2</private> 3 never closed", "a"),
        ("stray </private> closing", "closing"),
        ("</private> closing", "closing"),
        ("<private/> self closing", "self closing"),
        ("  indented <private>x</private>\n", "  indented\n"),
        ("<private>x</private> <private>y</private>", ""),
    ],
)
def test_strip_private(text: str, expected: str) -> None:
    assert strip_private(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<private>everything</private>", True),
        ("  <private>a</private>\n<PRIVATE>b</PRIVATE>  ", True),
        ("<private>never closed", True),
        ("<private>a</private> visible", False),
        ("plain text", False),
        ("", False),
        ("   ", False),
        ("</private>", False),
    ],
)
def test_is_entirely_private(text: str, expected: bool) -> None:
    assert is_entirely_private(text) is expected


def test_private_text_never_reaches_redaction_output() -> None:
    text = "run it <private>with password=" + "hunter2hunter2" + " and ghp_" + mixed(36) + "</private> now"
    assert scrub(text) == "run it now"


# ------------------------------------------------------------------------------------------------------------------
# scrub
# ------------------------------------------------------------------------------------------------------------------


def test_scrub_walks_nested_structures_and_copies() -> None:
    Point = namedtuple("Point", "label value")
    token = "ghp_" + mixed(36)
    event = {
        "tool_name": "Bash",
        "tool_input": {"command": "export GH_TOKEN=" + token, "args": ["-v", "<private>me</private>", 3]},
        "tool_response": ("ok", {"password": "plain words", "nested": [["AKIA" + "IOSFODNN7EXAMPLE"]]}),
        "point": Point("Bearer " + mixed(30), 1.5),
        "password = '" + "kept-as-key" + "'": None,
        "count": 7,
        "flag": True,
        "raw": b"password=hunter2hunter2",
    }
    cleaned = scrub(event)
    assert cleaned["tool_input"]["command"] == "export GH_TOKEN=[REDACTED:github_token]"
    assert cleaned["tool_input"]["args"] == ["-v", "", 3]
    assert cleaned["tool_response"] == ("ok", {"password": "[REDACTED:secret_assignment]",
                                               "nested": [["[REDACTED:aws_access_key]"]]})
    assert isinstance(cleaned["tool_response"], tuple)
    assert cleaned["point"] == Point("Bearer [REDACTED:bearer_token]", 1.5)
    assert isinstance(cleaned["point"], Point)
    assert "password = '[REDACTED:secret_assignment]'" in cleaned  # keys are redacted too
    assert (cleaned["count"], cleaned["flag"], cleaned["raw"]) == (7, True, b"password=hunter2hunter2")
    assert event["tool_input"]["command"].endswith(token)
    assert cleaned["tool_input"] is not event["tool_input"]


def test_scrub_leaves_non_strings_alone() -> None:
    for value in (None, 0, 1.5, True, b"bytes"):
        assert scrub(value) is value


# ------------------------------------------------------------------------------------------------------------------
# Idempotence and robustness
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [text for _, text, _ in EXAMPLES] + NEGATIVES)
def test_redaction_is_idempotent(text: str) -> None:
    once = redact_secrets(text)
    assert redact_secrets(once) == once
    assert scrub(scrub(text)) == scrub(text)


def test_redaction_is_idempotent_on_random_mixtures() -> None:
    rng = random.Random(1234)
    pieces = [text for _, text, _ in EXAMPLES] + NEGATIVES
    glue = [" ", "\n", "", "=", ": ", '"', "'", "/", "@", ":", ",", "\t", "x", "_"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) + rng.choice(glue) for _ in range(rng.randint(2, 6)))
        once = redact_secrets(text)
        assert redact_secrets(once) == once, text


def _random_megabyte(rng: random.Random) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t-_=:/.@\"'<>[](){};,+"
    lures = [
        "sk-", "sk-ant-", "ghp_", "eyJ", "AKIA", "AIza", "xoxb-", "glpat-", "SG.", "hf_", "npm_", "pypi-AgE",
        "-----BEGIN RSA PRIVATE KEY-----", "password=", "token: ", "api_key = \"", "https://u:", "Bearer ",
        "Authorization: Basic ", "curl -u a:", "AccountKey=", "aws_secret_access_key=", "<private>", "</private>",
    ]
    parts: list[str] = []
    size = 0
    while size < 1_000_000:
        part = rng.choice(lures) if rng.random() < 0.05 else "".join(rng.choices(alphabet, k=rng.randint(1, 40)))
        parts.append(part)
        size += len(part)
    return "".join(parts)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_megabyte_inputs_finish() -> None:
    rng = random.Random(7)
    inputs = [
        _random_megabyte(rng),
        "a-" * 500_000,
        "sk-" * 333_334,
        "eyJ" + "a" * 999_997,
        "-----BEGIN RSA PRIVATE KEY-----\n" * 31_000,
        "https://" + "a:" * 499_996,
        "password=" * 111_112,
        "<private>" * 111_112,
        "Bearer " * 142_858,
        "x" * 1_000_000,
    ]
    for text in inputs:
        assert isinstance(scrub(text), str)


# ------------------------------------------------------------------------------------------------------------------
# Secrets in the shapes tool calls carry them
# ------------------------------------------------------------------------------------------------------------------

PKCS8_HEAD = "-----BEGIN " + "PRIVATE KEY-----"
CERT_HEAD = "-----BEGIN " + "CERTIFICATE-----"


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


PKCS8_B64 = _b64(PKCS8_HEAD + "\n" + mixed(64) + "\n")
EC_B64 = _b64("-----BEGIN " + "EC PRIVATE KEY-----\n" + mixed(50))
OPENSSH_B64 = _b64("-----BEGIN " + "OPENSSH PRIVATE KEY-----\n" + mixed(300))
JS_PEM = "const key = '" + PKCS8_HEAD + "\\n' +\n  '" + mixed(64) + "\\n' +\n  '-----END PRIVATE KEY-----';"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        # `aws secretsmanager get-secret-value`, `docker inspect`, logs: JSON inside a JSON string
        ('"SecretString": "{\\"username\\":\\"admin\\",\\"password\\":\\"' + "Xk9" + 'pw\\"}"', "Xk9pw"),
        ('{\\"api_key\\": \\"' + mixed(32) + '\\", \\"region\\": \\"eu\\"}', mixed(32)),
        ('{\\"SecretAccessKey\\":\\"' + AWS_SECRET + '\\"}', AWS_SECRET),
        ('{\\"headers\\": {\\"Authorization\\": \\"' + mixed(30) + '\\"}}', mixed(30)),
        # a key written as string literals in source code (Python, JS, Go)
        ('KEY = ("' + PKCS8_HEAD + '\\n"\n    "' + mixed(64) + '\\n"\n    "' + mixed(40) + '\\n"\n'
         '    "-----END PRIVATE KEY-----\\n")', mixed(64)),
        (JS_PEM, mixed(64)),
        ('lines = ["' + PKCS8_HEAD + '", "' + mixed(64) + '", "' + mixed(20) + '"]', mixed(64)),
        # a base64-encoded private key: kubeconfig `client-key-data`, a Kubernetes TLS secret, `base64 key.pem`
        ("    client-key-data: " + PKCS8_B64, PKCS8_B64[30:]),
        ("  tls.key: " + EC_B64, EC_B64[40:]),
        ("$ base64 id_rsa\n" + "\n".join(OPENSSH_B64[i : i + 76] for i in range(0, 440, 76)), OPENSSH_B64[228:304]),
        # passwords and tokens given to a command line as separate arguments
        ("docker login -u me --password " + "Hunter2pw" + " ghcr.io", "Hunter2pw"),
        ("vercel deploy --prod --token " + mixed(24), mixed(24)),
        ("gh api --api-key '" + mixed(20) + "' /user", mixed(20)),
        ("keytool -list -keystore ks.jks -storepass " + "chang3it", "chang3it"),
        ("mysql -uroot -p" + "Hunter2pw" + " -e 'select 1' app", "Hunter2pw"),
        ("sshpass -p '" + "Hunter2pw" + "' ssh deploy@host", "Hunter2pw"),
        ("echo x && docker login registry.example.com -u ci -p " + "Hunter2pw", "Hunter2pw"),
        # short values in .env files and shell assignments
        ("PGPASSWORD=" + "hunter2" + " psql -h db", "hunter2"),
        ("DB_PASSWORD=" + "s3cr3t" + "\nDB_HOST=localhost", "s3cr3t"),
        ("export REDIS_PASSWORD=" + "abc12" + "\n", "abc12"),
    ],
)
def test_secrets_in_tool_call_shapes_are_redacted(text: str, secret: str) -> None:
    redacted = redact_secrets(text)
    assert secret not in redacted, redacted
    assert "[REDACTED:" in redacted
    assert redact_secrets(redacted) == redacted


def test_context_of_command_line_secrets_is_kept() -> None:
    assert redact_secrets("docker login -u me --password " + "Hunter2pw" + " ghcr.io") == (
        "docker login -u me --password [REDACTED:cli_secret] ghcr.io"
    )
    assert redact_secrets("mysql -uroot -p" + "Hunter2pw" + " app") == "mysql -uroot -p[REDACTED:cli_secret] app"
    assert redact_secrets("PGPASSWORD=" + "hunter2" + " psql") == "PGPASSWORD=[REDACTED:secret_assignment] psql"
    kube = "client-certificate-data: " + _b64(CERT_HEAD + "\n" + mixed(64)) + "\nclient-key-data: " + _b64(
        PKCS8_HEAD + "\n" + mixed(64))
    assert redact_secrets(kube) == (
        "client-certificate-data: " + _b64(CERT_HEAD + "\n" + mixed(64)) + "\nclient-key-data: [REDACTED:private_key]"
    )


@pytest.mark.parametrize(
    "text",
    [
        "docker build --secret id=npmrc,src=.npmrc .",
        "docker login --password-stdin ghcr.io",
        'gh auth login --token "$GH_TOKEN"',
        "cli --token $(cat token.txt)",
        "cli --password --verbose",
        "  --token TOKEN        the API token to use",
        "pass the --password flag, or the --api-key option.",
        "mysql -u root -p app_db",
        "mysql -h db -p -e 'select 1'",
        "ssh -p 2222 host",
        "docker run -p 8080:80 image",
        "MAX_TOKENS=4096",
        "MAX_TOKEN=4096",
        "SECRET=true",
        "PASSWORD=",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "token 3f786850e387550fdab836ed7e6dc881de23001b",
        "session_id=550e8400-e29b-41d4-a716-446655440000",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "certificate-authority-data: " + _b64(CERT_HEAD + "\n" + mixed(64)),
        '{\\"token\\": null, \\"password\\": \\"\\"}',
        '{\\"token_count\\": 5}',
    ],
)
def test_ordinary_command_lines_and_identifiers_are_kept(text: str) -> None:
    assert redact_with_counts(text) == (text, {})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the second half of a private block read on its own (Read with an offset, `tail`, a chunked response)
        ("more private lines\npassword is hunter2\n</private>\nvisible", "visible"),
        ("x <private>a</private> y\nsecret tail</private> z", "z"),
    ],
)
def test_a_closing_tag_without_its_opening_hides_what_precedes_it(text: str, expected: str) -> None:
    assert strip_private(text) == expected
    assert is_entirely_private(text) is False
    assert is_entirely_private("only this was private </private>") is True


# ------------------------------------------------------------------------------------------------------------------
# Keys and values together
# ------------------------------------------------------------------------------------------------------------------


def test_a_value_under_a_secret_key_is_redacted_whatever_it_looks_like() -> None:
    marker = placeholder("secret_assignment")
    event = {"tool_input": {"api_key": "Zq8Rk2" + "pLm9", "token": "short1", "client_secret": "plain words",
                            "AWS_SECRET_ACCESS_KEY": mixed(40), "Authorization": "Basic " + "YWRtaW46eA==",
                            "pin": {"password": 482913}, "env": [{"name": "DB_PASSWORD", "value": "hunter2"}],
                            "credentials": {"user": "me", "secret_id": 7, "on": True}}}
    cleaned = scrub(event)["tool_input"]
    assert cleaned["api_key"] == cleaned["token"] == cleaned["client_secret"] == marker
    assert cleaned["AWS_SECRET_ACCESS_KEY"] == cleaned["Authorization"] == marker
    assert cleaned["pin"] == {"password": marker}
    assert cleaned["env"] == [{"name": "DB_PASSWORD", "value": marker}]
    assert cleaned["credentials"] == {"user": marker, "secret_id": 7, "on": True}  # fail closed, shape kept


def test_keys_that_only_mention_a_key_word_keep_their_values() -> None:
    kept = {"token_count": 1234, "max_tokens": 4096, "password_policy_url": "https://example.test/policy",
            "secret_name": "db-creds", "tokenizer": "cl100k", "PWD": "/home/me", "password": "", "token": None,
            "api_key": "${API_KEY}", "env": [{"name": "PATH", "value": "/usr/bin"}]}
    assert scrub(kept) == kept


def test_tokens_as_keys_base64_of_secrets_and_json_text_are_redacted() -> None:
    import base64
    import json

    token = "ghp_" + mixed(36)
    aws = base64.b64encode(("aws_secret_access_key=" + mixed(40)).encode()).decode()
    assert scrub({token: 1}) == {"[REDACTED:github_token]": 1}
    assert scrub("blob " + base64.b64encode(token.encode()).decode() + " end") == "blob [REDACTED:github_token] end"
    assert scrub(aws) == "[REDACTED:aws_secret_key]"
    text = json.dumps({"items": [{"password": 'with "quotes" ' + mixed(12)}], "count": 2}, indent=2)
    cleaned = scrub(text)
    assert mixed(12) not in cleaned and json.loads(cleaned)["items"][0]["password"] == "[REDACTED:secret_assignment]"
    plain = json.dumps({"count": 2, "name": "x"}, indent=4)
    assert scrub(plain) is not None and scrub(plain) == plain  # nothing found: the text is kept as it was
    assert scrub("YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo=") == "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo="  # base64 of text
