"""Secrets held as JSON values never reach a file: real hook processes, a real worker, then the raw bytes of
``memcairn.db``, ``vectors.sqlite`` and their WAL files.

Every fake secret is assembled from pieces so this file never holds a string shaped like a real credential."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from hook_helpers import Workers, hook, payload

from memcairn.wire.client import WorkerClient


def mixed(seed: str, length: int) -> str:
    return (seed + "a1B2c3D4e5F6g7H8i9J0kLmN" * 4)[:length]


API_KEY = mixed("Zq8Rk2", 32)
PASSWORD = "hunter2-" + "abc123XYZ"
TOKEN = mixed("Tk7Qw", 28)
CLIENT_SECRET = mixed("Cs4Vb", 30)
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCY" + "QUOKKAKEY0"
GH_TOKEN = "ghp_" + mixed("Gh9Pz", 36)
GH_KEY = "ghp_" + mixed("Kx5Lm", 36)
NESTED_PASSWORD = mixed("Np3Jd", 24)
SAVED_KEY = mixed("Sv6Wq", 26)
AWS_B64 = base64.b64encode(("aws_secret_access_key=" + AWS_SECRET).encode()).decode()
GH_B64 = base64.b64encode(GH_TOKEN.encode()).decode()
SECRETS = [API_KEY, PASSWORD, TOKEN, CLIENT_SECRET, AWS_SECRET, GH_TOKEN, GH_KEY, NESTED_PASSWORD, SAVED_KEY,
           AWS_B64, GH_B64]
# What must still be stored: values of keys that only mention a key word, and the tool's ordinary output.
KEPT = ["frobnicator-7421", "https://example.test/policy-quokka", "9317", "ordinary-value-marmot"]


def tell_tale(secret: str) -> list[bytes]:
    """Byte strings whose presence in a file means ``secret`` leaked: the whole of it, and its tail lower-cased
    (FTS5 keeps lower-cased terms, prefix-compressed against the previous term)."""
    return [secret.encode(), secret[-12:].encode(), secret[-12:].lower().encode()]


def files_of(home: Path) -> dict[str, bytes]:
    out = {}
    for name in ("memcairn.db", "memcairn.db-wal", "vectors.sqlite", "vectors.sqlite-wal"):
        path = home / name
        if path.exists():
            out[name] = path.read_bytes()
    return out


def wait_until_stored(client: WorkerClient) -> None:
    deadline = time.monotonic() + 60
    while True:
        stats = client.get_json("/api/stats")
        queue, mirror = stats["ingest"], stats["mirror"]
        if queue["pending"] == 0 and queue["done"] >= 3 and mirror["lag"] == 0 and not mirror["outbox"]:
            return
        assert queue["failed"] == 0 and time.monotonic() < deadline, stats
        time.sleep(0.2)


def test_secrets_as_json_keys_and_values_reach_no_file(env: dict[str, str], project: Path, workers: Workers,
                                                       isolated_home: Path) -> None:
    client = workers.start(env)
    assert hook(env, "user-prompt-submit", payload("user_prompt_submit", project,
                                                   prompt="deploy the frobnicator-7421 service"))[0] == {}
    response = {
        "stdout": "deployed frobnicator-7421",
        "password": PASSWORD,
        "cache": {GH_KEY: "ordinary-value-marmot"},
        "blob": AWS_B64,
        "encoded": GH_B64,
        "auth": {"credentials": {"password": NESTED_PASSWORD}},
    }
    tool = payload("post_tool_use_bash", project, tool_input={
        "command": "deploy --verbose",
        "api_key": API_KEY, "token": TOKEN, "client_secret": CLIENT_SECRET, "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "token_count": 9317, "password_policy_url": "https://example.test/policy-quokka",
    }, tool_response=json.dumps(response, indent=2))
    assert hook(env, "post-tool-use", tool)[0] == {}
    assert hook(env, "stop", payload("stop", project))[0] == {}
    saved = client.post_json("/api/memory/save", {"project": "calc", "text": "the frobnicator-7421 deploy notes",
                                                  "metadata": {"service": {"api_key": SAVED_KEY}}})
    assert saved["created"]
    wait_until_stored(client)

    files = files_of(isolated_home)
    assert "memcairn.db" in files and "vectors.sqlite" in files
    for name, raw in files.items():
        for secret in SECRETS:
            leaked = [t for t in tell_tale(secret) if t in raw]
            assert not leaked, f"{name} holds {leaked}"
    stored = files["memcairn.db"] + files.get("memcairn.db-wal", b"")
    for text in KEPT:
        assert text.encode() in stored, f"{text} was redacted although it is no secret"
