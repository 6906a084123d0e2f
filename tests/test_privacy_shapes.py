"""Secrets in the shapes the second hardening campaign found stored: env names ending ``_KEY``/``_SIGNING``,
prose ("the password is ..."), letters-only and short YAML passwords, ``echo X | docker login --password-stdin``,
``.pgpass`` lines, age / Twilio / DigitalOcean keys and more providers' prefixes, a secret split across two JSON
fields, a GCP ``private_key_id``, htpasswd hashes, short passwords in assignments; and the look-alikes that must
stay. Through the text rules, the JSON walk, the team server's admission and a real worker fed by real hooks.

Every fake secret is assembled from pieces at run time, so this file holds nothing shaped like a credential."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from hook_helpers import Workers, hook, payload
from secret_examples import EXAMPLES

from memcairn.bench import secrets as bench_secrets
from memcairn.capture.single_event import HookEvent, admitted, memories
from memcairn.wire import spool
from memcairn.wire.client import WorkerClient
from memcairn.wire.privacy.redaction import redact_secrets, redact_with_counts
from memcairn.wire.privacy.rules import PATTERN_NAMES, placeholder
from memcairn.wire.privacy.scrubbing import scrub


def mixed(length: int, seed: str = "") -> str:
    return (seed + "a1B2c3D4e5F6g7H8i9J0kLmN" * 20)[:length]


HEX = "3f786850e387550fdab836ed7e6dc881" * 4
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 2
PW = "Tr0ub4" + "dor9x"

# (placeholder type, text holding a fake secret, the part that must disappear), one family after another
SHAPES: list[tuple[str, str, str]] = [
    # env names that end in _KEY or _SIGNING, holding a token
    ("secret_assignment", "STRIPE_KEY=" + mixed(28, "Xq7"), mixed(28, "Xq7")),
    ("secret_assignment", "export SENDGRID_KEY=" + mixed(40, "Zr4"), mixed(40, "Zr4")),
    ("secret_assignment", "JWT_SIGNING=" + mixed(30, "Pk9"), mixed(30, "Pk9")),
    ("secret_assignment", 'stripeKey: "' + mixed(24, "Sk3") + '"', mixed(24, "Sk3")),
    ("secret_assignment", "WEBHOOK_KEY=" + HEX[:40], HEX[:40]),
    # prose
    ("prose_secret", "fyi my db password is " + PW + ", rotate it", PW),
    ("prose_secret", "the password is " + "hunter2", "hunter2"),
    ("prose_secret", "I changed the password for staging to `" + "swordfish" + "`", "swordfish"),
    ("prose_secret", "The API key is " + mixed(24, "Ak2") + ".", mixed(24, "Ak2")),
    ("prose_secret", "the pin is " + "4921", "4921"),
    # YAML passwords of letters only, and short ones
    ("secret_assignment", "db:\n  user: app\n  password: " + "Swordfish" + "\n", "Swordfish"),
    ("secret_assignment", "database:\n  password: " + "hunter" + "\n", "hunter"),
    ("secret_assignment", "- password: " + "Marlin" + "\n", "Marlin"),
    # short passwords in assignments
    ("secret_assignment", "connect with password=" + "hunter2" + " then retry", "hunter2"),
    ("secret_assignment", "password: " + "hunter2", "hunter2"),
    # a password piped into a registry login
    ("cli_secret", "echo " + PW + " | docker login -u ci --password-stdin ghcr.io", PW),
    ("cli_secret", "printf '" + PW + "' | helm registry login r.example.com --password-stdin", PW),
    # ~/.pgpass
    ("pgpass_password", "db.internal:5432:app:appuser:" + PW + "\n", PW),
    ("pgpass_password", "*:*:*:postgres:" + PW, PW),
    # providers' prefixes
    ("age_secret_key", "AGE-SECRET-KEY-1" + BECH32[:58], BECH32[:58]),
    ("twilio_api_key", "TWILIO_API=" + "SK" + HEX[:32], "SK" + HEX[:32]),
    ("digitalocean_token", "doctl auth init -t " + "dop_v1_" + HEX[:64], HEX[:64]),
    ("shopify_token", "shpat_" + HEX[:32], HEX[:32]),
    ("databricks_token", "dapi" + HEX[:32], HEX[:32]),
    ("linear_api_key", "lin_api_" + mixed(40), mixed(40)),
    ("postman_api_key", "PMAK-" + HEX[:24] + "-" + HEX[:34], HEX[:34]),
    ("grafana_token", "glsa_" + mixed(32) + "_" + HEX[:8], mixed(32)),
    ("doppler_token", "dp.st." + mixed(40), mixed(40)),
    ("pulumi_token", "pul-" + HEX[:40], HEX[:40]),
    ("atlassian_token", "ATATT3" + mixed(186, "xFf"), mixed(186, "xFf")[:60]),
    ("mailgun_key", "key-" + HEX[:32], HEX[:32]),
    # a GCP service account's key id
    ("gcp_private_key_id", '{"type": "service_account", "private_key_id": "' + HEX[1:41] + '"}', HEX[1:41]),
    # htpasswd and crypt(3) hashes
    ("password_hash", "admin:" + "$apr1$" + "r31XyZ9a$" + mixed(22, "Hq"), mixed(22, "Hq")),
    ("password_hash", "deploy:" + "$2y$" + "05$" + mixed(53, "Bc"), mixed(53, "Bc")),
    ("password_hash", "root:" + "$6$" + "saltsalt$" + mixed(86, "Sh") + ":19000:0:99999:7:::", mixed(86, "Sh")),
    ("password_hash", "guest:" + "{SHA}" + mixed(27, "W6") + "=", mixed(27, "W6")),
]


@pytest.mark.parametrize(("name", "text", "secret"), SHAPES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(SHAPES)])
def test_each_new_shape_is_redacted(name: str, text: str, secret: str) -> None:
    redacted, counts = redact_with_counts(text)
    assert counts.get(name, 0) >= 1, (redacted, counts)
    assert placeholder(name) in redacted and secret not in redacted
    assert redact_secrets(redacted) == redacted


def test_every_rule_is_exercised_here_or_in_the_first_campaign_s_examples() -> None:
    exercised = {name for name, _, _ in EXAMPLES} | {name for name, _, _ in SHAPES}
    assert set(PATTERN_NAMES) == exercised


def test_what_surrounds_the_new_shapes_is_kept() -> None:
    assert redact_secrets("echo " + PW + " | docker login -u ci --password-stdin ghcr.io") == (
        "echo [REDACTED:cli_secret] | docker login -u ci --password-stdin ghcr.io")
    assert redact_secrets("db.internal:5432:app:appuser:" + PW) == (
        "db.internal:5432:app:appuser:[REDACTED:pgpass_password]")
    assert redact_secrets("fyi my db password is " + PW + ", rotate it") == (
        "fyi my db password is [REDACTED:prose_secret], rotate it")
    assert redact_secrets("admin:" + "$apr1$" + "r31XyZ9a$" + mixed(22)) == "admin:[REDACTED:password_hash]"


def test_a_secret_split_across_two_json_fields_is_redacted() -> None:
    ssm = {"Parameter": {"Name": "/prod/db/password", "Type": "SecureString", "Value": PW, "Version": 3}}
    assert scrub(ssm) == {"Parameter": {**ssm["Parameter"], "Value": "[REDACTED:secret_assignment]"}}
    stack = [{"ParameterKey": "DBPassword", "ParameterValue": PW}, {"ParameterKey": "Stage", "ParameterValue": "prod"}]
    assert scrub(stack) == [{"ParameterKey": "DBPassword", "ParameterValue": "[REDACTED:secret_assignment]"},
                            {"ParameterKey": "Stage", "ParameterValue": "prod"}]
    form = {"label": "API key", "value": mixed(24, "Fk1")}
    assert scrub(form)["value"] == "[REDACTED:secret_assignment]"
    as_text = scrub(json.dumps(ssm, indent=2))
    assert PW not in as_text and "/prod/db/password" in as_text


def test_json_values_under_key_names_are_redacted_when_they_read_as_tokens() -> None:
    env_map = {"STRIPE_KEY": mixed(28, "Xq7"), "sort_key": "created_at", "PRIMARY_KEY": "id",
               "SSH_KEY": "~/.ssh/id_rsa", "private_key_id": HEX[1:41]}
    assert scrub(env_map) == {**env_map, "STRIPE_KEY": "[REDACTED:secret_assignment]",
                              "private_key_id": "[REDACTED:secret_assignment]"}
    assert mixed(28, "Xq7") not in scrub(json.dumps({"env": env_map}))


LOOKALIKES = [
    "KEY_COUNT=3",
    'sort_key = "created_at"',
    "PRIMARY_KEY=id",
    "SSH_KEY=~/.ssh/id_rsa",
    "CACHE_KEY=user-profile-settings",
    "partition_key: tenant_id",
    "the token is expired, log in again",
    "the password is required",
    "the password is sha256-hashed",
    "the password is stored in the vault",
    "set the token to use in the header",
    "the token limit is 8000",
    "password: str",
    "    password: SecretStr",
    "  password: Changeme",
    "password: {{ vault_db_password }}",
    "echo $REGISTRY_TOKEN | docker login -u ci --password-stdin ghcr.io",
    "cat token.txt | docker login --password-stdin ghcr.io",
    "--- PASS: TestParseArgs/empty_input (0.00s)",
    "if (token === '--json') {",
    "if (!tableToken || tableToken === '*') {",
    "  --pass: #22c55e;",
    "mac 00:1a:2b:3c:4d:5e at 12:30:00",
    "a.py:12:5: E501 line too long",
    "SKIP_TESTS=1",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "price is $25.00 and the key-value store is up",
    "the token is JWT-based and the password is None",
    "pin to v2.3.4 and the token to gh-1234 later",
    'publicKey: "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1L"',
]


@pytest.mark.parametrize("text", LOOKALIKES)
def test_look_alikes_are_kept(text: str) -> None:
    assert redact_with_counts(text) == (text, {})


def test_the_bench_catalogue_is_all_redacted_and_its_look_alikes_kept() -> None:
    result = bench_secrets.run()
    assert len(result["shapes"]) >= 60
    assert [row["shape"] for row in result["shapes"] if row["result"] != "redacted"] == []
    assert result["false_positives"] == []


# -- the team server's admission: the same code as the worker's -------------------------------------------------
def test_the_team_server_s_admission_redacts_prose_and_key_shapes() -> None:
    from memcairn.server.queue import payload as queue_payload

    prompt = HookEvent("user_prompt", "calc", "s1", "claude-code",
                       {"prompt": "deploy it; the password is " + "hunter2" + " and STRIPE_KEY=" + mixed(28, "Xq7")})
    call = HookEvent("tool_use", "calc", "s1", "claude-code", {
        "tool_name": "Bash", "tool_input": {"command": "echo " + PW + " | docker login --password-stdin ghcr.io"},
        "tool_response": {"stdout": "db.internal:5432:app:appuser:" + PW + "\nJWT_SIGNING=" + mixed(30, "Pk9")}})
    secrets = ["hunter2", mixed(28, "Xq7"), PW, mixed(30, "Pk9")]
    for event in (prompt, call):
        kept = admitted(event)
        assert kept is not None
        queued = json.dumps(queue_payload(event))
        made = json.dumps([item.__dict__ for item in memories(kept, 1_700_000_000_000)], default=str)
        for secret in secrets:
            assert secret not in queued and secret not in made
    assert "deploy it" in admitted(prompt).body["prompt"]


# -- a real worker fed by real hooks ------------------------------------------------------------------------------
def _wait_stored(client: WorkerClient, events: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        queue = client.get_json("/api/stats")["ingest"]
        if queue["pending"] == 0 and queue["done"] >= events:
            return
        assert queue["failed"] == 0 and time.monotonic() < deadline, queue
        time.sleep(0.2)


def _leaks(home: Path, secrets: list[str]) -> dict[str, list[str]]:
    """Which secrets a file of the home holds: the store and its WAL, the vector index, every spool file."""
    found: dict[str, list[str]] = {}
    files = [home / n for n in ("memcairn.db", "memcairn.db-wal", "vectors.sqlite", "vectors.sqlite-wal")]
    files += list((home / "spool").rglob("*")) if (home / "spool").exists() else []
    for path in files:
        if path.is_file():
            raw = path.read_bytes()
            hits = [s for s in secrets if s.encode() in raw or s[-10:].lower().encode() in raw]
            if hits:
                found[str(path)] = hits
    return found


def test_hooks_to_a_real_worker_store_none_of_the_new_shapes(env: dict[str, str], project: Path, workers: Workers,
                                                             isolated_home: Path) -> None:
    secrets = ["hunter2q", mixed(28, "Xq7"), PW, mixed(30, "Pk9"), HEX[1:41], "dop_v1_" + HEX[:64]]
    prompt = ("deploy the frobnicator-7421 service; fyi the password is " + secrets[0]
              + " and STRIPE_KEY=" + secrets[1])
    tool_output = "\n".join(["db.internal:5432:app:appuser:" + PW, "JWT_SIGNING=" + secrets[3],
                             json.dumps({"type": "service_account", "private_key_id": secrets[4]}),
                             "DO_TOKEN=" + secrets[5], "deployed frobnicator-7421"])

    # first with no worker: the hooks spool the raw events; the worker drains them at start
    spooled = payload("post_tool_use_bash", project, tool_use_id="toolu_shapes_0001",
                      tool_input={"command": "echo " + PW + " | docker login --password-stdin ghcr.io"},
                      tool_response={"stdout": tool_output, "stderr": ""})
    assert hook(env, "post-tool-use", spooled)[0] == {}
    assert len(list(spool.pending(str(isolated_home)))) == 1
    assert _leaks(isolated_home, secrets) == {}  # the spooled event rests on disk without them

    client = workers.start(env)
    assert hook(env, "user-prompt-submit", payload("user_prompt_submit", project, prompt=prompt))[0] == {}
    live = payload("post_tool_use_bash", project, tool_use_id="toolu_shapes_0002",
                   tool_input={"command": "cat .pgpass && env", "description": "look at the settings"},
                   tool_response={"stdout": tool_output, "stderr": ""})
    assert hook(env, "post-tool-use", live)[0] == {}
    assert hook(env, "stop", payload("stop", project))[0] == {}
    _wait_stored(client, 4)

    assert list(spool.pending(str(isolated_home))) == []
    with sqlite3.connect(isolated_home / "memcairn.db") as conn:
        payloads = [row[0] for row in conn.execute("SELECT payload FROM ingest_events")]
        rows = conn.execute("SELECT title, text, narrative FROM memory_items").fetchall()
    texts = [" ".join(str(v) for v in row) for row in rows]
    assert len(payloads) == 4 and texts
    for secret in secrets:
        assert not any(secret in p for p in payloads), secret
        assert not any(secret in t for t in texts), secret
    assert any("[REDACTED:prose_secret]" in p for p in payloads)
    assert any("[REDACTED:pgpass_password]" in p for p in payloads)
    assert any("frobnicator-7421" in t for t in texts)  # the ordinary text around them is stored
    assert _leaks(isolated_home, secrets) == {}


def test_bench_secrets_prints_the_table_and_writes_its_rows(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "secrets.json"
    done = subprocess.run([sys.executable, "-m", "memcairn", "bench", "secrets", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "AGE-SECRET-KEY-1" in done.stdout and "redacted" in done.stdout
    assert "false positives: none" in done.stdout
    totals = json.loads(out.read_text())["totals"]
    assert totals["shapes"] >= 60 and totals["stored"] == 0 and totals["false_positives"] == 0
