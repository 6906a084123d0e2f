"""A hook cuts oversized strings before the worker redacts them: no part of a secret may survive the cut.

The worker's redaction only knows whole secrets, so a cut through one used to let its head through. Each case
puts a secret of a kind ``capture.privacy`` knows exactly across the cut of a long tool output and checks the
body the hook sends (``capture.bodyfit.fit_body``, and once through the real hook process to a stand-in worker).

Every fake secret is assembled from pieces so this file never holds a string shaped like a real credential."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memcairn.bench.hooks import hook_command
from memcairn.wire import bodyfit
from memcairn.wire.privacy.scrubbing import scrub
from memcairn.wire.protocol import HOOK_BODY_BYTES

CAP = bodyfit.STRING_CAPS[0]  # the first cut of an oversized body
FILLER = "lorem ipsum dolor sit amet\n"  # shares no four characters with any secret below
TAIL = FILLER * (HOOK_BODY_BYTES // len(FILLER) + 1000)  # makes the body too large: the strings get cut


def mixed(length: int) -> str:
    return ("a1B2c3D4e5F6g7H8i9J0kLmN" * 20)[:length]


# (kind, text before the secret, the secret, where its body starts, text after it). The body is what must not
# leak: the part after a fixed, public prefix (``ghp_``, ``sk-ant-``) or the value of a ``key = value``.
SECRETS: list[tuple[str, str, str, int, str]] = [
    ("anthropic_api_key", "export KEY=", "sk-ant-" + "api03-" + mixed(60), 7, "\n"),
    ("openai_api_key", "key is ", "sk-" + "proj-" + mixed(48), 3, " ok\n"),
    ("aws_access_key", "aws_access_key_id = ", "AKIA" + "IOSFODNN7EXAMPLE", 4, "\n"),
    ("aws_secret_key", "aws_secret_access_key = ",
     "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCY" + "EXAMPLEKEY", 0, "\n"),
    ("github_token", "git push https://", "ghp_" + mixed(36), 4, "@github.com/o/r\n"),
    ("github_fine_grained_token", "token: ", "github_pat_" + "11ABCDEFG0" + "_" + mixed(59), 11, "\n"),
    ("gitlab_token", "GL=", "glpat-" + mixed(24), 6, "\n"),
    ("slack_token", "SLACK=", "xoxb-" + "123456789012-" + mixed(24), 5, "\n"),
    ("stripe_key", "stripe ", "sk_" + "live_" + mixed(24), 8, "\n"),
    ("google_api_key", "maps ", "AIza" + "Sy" + mixed(33), 4, "\n"),
    ("npm_token", "//registry.npmjs.org/:_authToken ", "npm_" + mixed(36), 4, "\n"),
    ("huggingface_token", "HF ", "hf_" + mixed(34), 3, "\n"),
    ("jwt", "token ", "eyJ" + "hbGciOiJIUzI1NiJ9" + "." + "eyJ" + "zdWIiOiIxMjM0NTY3ODkwIn0" + "." + mixed(43), 3,
     " expires\n"),
    ("bearer_token", "Authorization: Bearer ", "Zm9vYmFy" + mixed(32), 0, "\n"),
    ("url_credentials", "postgres://admin:", "Pw" + mixed(20), 0, "@db.internal:5432/app\n"),
    ("secret_assignment", "DB_PASSWORD=", "Hunter" + mixed(14), 0, "\n"),
    ("secret_assignment", 'password = "', "correct horse battery staple", 0, '"\n'),
    ("secret_assignment", '{"api_key": "', "Qz" + mixed(30), 0, '"}\n'),
    ("xml_secret", "<server><password>", "Sup3r secret phrase Pw9", 0, "</password></server>\n"),
    ("netrc_password", "machine api.example.com login alice password ", "Sup3r" + mixed(18), 0, "\n"),
    ("cli_secret", "docker login -u me --password ", "Hunter2" + mixed(16), 0, " ghcr.io\n"),
    ("cookie", "Cookie: ", "sid=" + mixed(30) + "; theme=dark", 4, "\n"),
    ("private_key", "key:\n", "-----BEGIN " + "RSA PRIVATE KEY-----\n" + "MIIEow" + mixed(58) + "\n" + mixed(64)
     + "\n-----END " + "RSA PRIVATE KEY-----", 32, "\n"),
]


def _ids(case: tuple[str, str, str, int, str]) -> str:
    return case[0] + ("_quoted" if case[1].endswith(('"', "'")) else "")


def _cuts(secret: str, body_at: int) -> list[int]:
    """Where the cut falls inside the secret (characters of it before the cut): early in its body, half-way,
    and just before its end; always at least four characters of the body before the cut."""
    body = len(secret) - body_at
    return sorted({body_at + 4, body_at + body // 2, len(secret) - 1})


def _output(before: str, secret: str, after: str, inside: int, filler: str = FILLER) -> str:
    """A long tool output holding ``before + secret + after`` with the cut ``inside`` characters into the
    secret."""
    lead = CAP - inside - len(before)
    filler = (filler * (lead // len(filler) + 1))[-lead:]
    filler = filler[:-1] + ("\n" if "\n" in filler else " ")  # ``before`` starts a line, or a word
    text = filler + before + secret + after + TAIL
    assert text[CAP - inside:CAP - inside + len(secret)] == secret
    return text


def _sent(stdout: str) -> str:
    raw = bodyfit.fit_body({"tool_name": "Bash", "tool_input": {"command": "env"},
                          "tool_response": {"stdout": stdout, "stderr": ""}})
    assert len(raw) <= HOOK_BODY_BYTES
    return json.loads(raw)["tool_response"]["stdout"]


@pytest.mark.parametrize("case", SECRETS, ids=[_ids(c) for c in SECRETS])
def test_a_secret_across_the_cut_leaves_nothing_of_itself(case: tuple[str, str, str, int, str]) -> None:
    kind, before, secret, body_at, after = case
    body = secret[body_at:]
    assert scrub(before + secret + after) != before + secret + after, f"privacy.py does not know {kind}"
    for inside in _cuts(secret, body_at):
        sent = _sent(_output(before, secret, after, inside))
        assert "characters cut by memcairn" in sent
        kept = secret[body_at:inside]  # what a plain cut keeps of the body
        for piece in (kept, body[:4]):
            assert piece not in sent, (kind, inside, sent[-120:])
            assert piece not in scrub(sent), (kind, inside)  # nor what the worker stores
        assert len(sent) >= CAP - inside - 200  # the text before the secret's line is kept


@pytest.mark.parametrize("filler", ["lorem ipsum dolor sit amet ", "xxxxxxxxxx"], ids=["one-line", "one-token"])
def test_without_line_breaks_near_the_cut_too(filler: str) -> None:
    """Minified JSON or a base64 blob: no line starts near the cut (or no word does)."""
    for kind, before, secret, body_at, after in SECRETS:
        inside = body_at + (len(secret) - body_at) // 2
        sent = _sent(_output(before, secret, after, inside, filler))
        for piece in (secret[body_at:inside], secret[body_at:body_at + 4]):
            assert piece not in sent and piece not in scrub(sent), (kind, sent[-120:])


def test_a_cut_through_plain_text_keeps_exactly_the_head() -> None:
    text = (FILLER * 700)[:CAP] + "x" * 50 + TAIL
    sent = _sent(text)
    head, marker = sent.split("\n… [", 1)
    assert head == text[:CAP]
    assert marker == f"{len(text) - CAP} characters cut by memcairn]"


def test_text_well_before_the_cut_is_sent_as_given_for_the_worker_to_redact() -> None:
    token = "ghp_" + mixed(36)
    text = "start " + token + " middle\n" + FILLER * 1000 + TAIL
    sent = _sent(text)
    assert sent.startswith("start " + token + " middle\n" + FILLER)
    assert sent.split("\n… [", 1)[0] == text[:CAP]
    assert scrub(sent).startswith("start [REDACTED:github_token] middle\n")


def test_past_the_budget_a_string_is_sent_as_the_marker_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A body of very many long strings must not make the hook slow: redaction stops at a budget, and what it
    could not redact is left out, not sent half-checked."""
    monkeypatch.setattr(bodyfit, "CUT_REDACT_BUDGET", 50_000)
    strings = [FILLER * 1_000 for _ in range(40)]  # 40 strings of 27,000 characters: cut at 16,000
    raw = bodyfit.fit_body({"tool_response": strings})
    sent = json.loads(raw)["tool_response"]
    cut = [s for s in sent if s.startswith(FILLER)]
    alone = [s for s in sent if s == "\n… [27000 characters cut by memcairn]"]
    assert cut and alone and len(cut) + len(alone) == 40
    assert all(len(s) < 16_100 for s in cut)


def test_a_cut_never_ends_inside_a_placeholder() -> None:
    for inside in range(1, 12):  # a cookie value that starts like a placeholder
        secret = "[REDACTEZ=" + mixed(20)
        sent = _sent(_output("Cookie: ", secret, "\n", inside))
        kept = sent.rsplit("\n… [", 1)[0]
        assert kept.rpartition("Cookie: ")[2] in ("", "[REDACTED:cookie]"), (inside, kept[-40:])


@pytest.mark.parametrize("dangling", ["password = ", "Authorization: Bearer ", "Cookie: sid", "--token ",
                                      "machine h.example.com login u password ", "https://user:", "API_KEY=",
                                      "<password>", "aws_secret_access_key = "])
def test_the_marker_is_never_read_as_a_secret_by_the_worker(dangling: str) -> None:
    """The kept text may end with a key whose value was cut away: the worker, which redacts again, must not take
    the marker for that value (it would swallow it) nor be kept by it from redacting anything."""
    text = "x\n" * ((CAP - len(dangling)) // 2) + "\n"
    text = text[: CAP - len(dangling)] + dangling + TAIL
    sent = _sent(text)
    assert sent.endswith(f"{dangling}\n… [{len(text) - CAP} characters cut by memcairn]")
    assert scrub(sent) == sent
    assert not bodyfit.CUT_MARKER.lstrip().startswith("[REDACTED:")
    assert not set(bodyfit.CUT_MARKER) & set("=:@\"'`")


def test_a_failing_redaction_sends_the_marker_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import memcairn.wire.privacy.redaction as privacy

    def broken(text: str) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(privacy, "redact_secrets", broken)
    text = "ghp_" + mixed(36) + " " + TAIL
    sent = _sent(text)
    assert sent == f"\n… [{len(text)} characters cut by memcairn]"


def test_prompts_and_messages_are_cut_the_same_way() -> None:
    secret = "sk-ant-" + "api03-" + mixed(60)
    for name in ("prompt", "last_assistant_message"):
        raw = bodyfit.fit_body({name: _output("key ", secret, "\n", 20)}, (name,))
        sent = json.loads(raw)[name]
        assert "characters cut by memcairn" in sent and secret[7:20] not in sent and secret[7:11] not in sent


def test_each_round_cuts_the_given_value_once() -> None:
    """A body still too large after the first cut is cut again from the values as given: one marker each."""
    strings = [FILLER * 1_000 for _ in range(80)]  # 80 strings of 27,000 characters: 2.1 MB, then 1.3 MB
    raw = bodyfit.fit_body({"tool_response": strings})
    sent = json.loads(raw)["tool_response"]
    assert len(raw) <= HOOK_BODY_BYTES
    assert all(s.count("characters cut by memcairn") == 1 for s in sent)
    cap = bodyfit.STRING_CAPS[1]
    assert sent[0] == strings[0][:cap] + f"\n… [{27_000 - cap} characters cut by memcairn]"


# -- through the real hook process --------------------------------------------------------------------------
class StandInWorker:
    """A loopback HTTP server that answers every request with ``{}`` and keeps the bodies it was sent."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.bodies: list[tuple[str, bytes]] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = next((int(line.split(":", 1)[1]) for line in lines[1:]
                               if line.lower().startswith("content-length:")), 0)
                while len(body) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                self.bodies.append((lines[0], body))
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                             b"Connection: close\r\n\r\n{}")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def stand_in() -> Iterator[StandInWorker]:
    worker = StandInWorker()
    yield worker
    worker.close()


def test_the_hook_process_sends_no_part_of_a_secret_across_the_cut(stand_in: StandInWorker, tmp_path: Path,
                                                                   isolated_home: Path) -> None:
    secret = "ghp_" + mixed(36)
    env = {**os.environ, "HOME": str(tmp_path / "user"), "MEMCAIRN_PORT": str(stand_in.port),
           "MEMCAIRN_WORKER_AUTOSTART": "0"}
    data: dict[str, Any] = {"session_id": "s-cut", "cwd": str(tmp_path), "hook_event_name": "PostToolUse",
                            "tool_name": "Bash", "tool_input": {"command": "env"},
                            "tool_response": {"stdout": _output("GH_TOKEN=", secret, "\n", 12), "stderr": ""}}
    done = subprocess.run([*hook_command(), "hook", "post-tool-use"], input=json.dumps(data).encode(),
                          capture_output=True, env=env, timeout=60, cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout) == {}, done.stderr
    posted = [body for line, body in stand_in.bodies if line.startswith("POST /api/sessions/observations")]
    assert len(posted) == 1
    assert len(posted[0]) <= HOOK_BODY_BYTES
    assert secret[4:12].encode() not in posted[0] and secret[4:8].encode() not in posted[0]
    stdout = json.loads(posted[0])["tool_response"]["stdout"]
    assert stdout.endswith(" characters cut by memcairn]") and stdout.rsplit("\n… [", 1)[0].endswith("GH_TOKEN=")


def test_an_ordinary_event_does_not_load_the_redaction() -> None:
    """The redaction is imported on the first cut only: an event under the size limit never pays for it."""
    probe = ("import json, sys\nfrom memcairn.hooks import events\nfrom memcairn.wire import bodyfit\n"
             "bodyfit.fit_body({'tool_response': {'stdout': 'x' * 100_000}})\n"
             "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True)
    loaded = set(json.loads(done.stdout))
    assert "memcairn.wire.privacy" not in loaded and "typing" not in loaded
