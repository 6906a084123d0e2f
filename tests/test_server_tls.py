"""TLS: `memcairn server --tls-cert --tls-key` serves HTTPS from every process (a self-signed certificate made
here, an https client that trusts only it), refuses a bad pair before starting; `memcairn connect` refuses plain
http:// to another machine unless --insecure, which the link keeps for the worker's forwarder."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

pytest.importorskip("pg0")
pytest.importorskip("psycopg")
pytest.importorskip("cryptography")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402
from pg_server_process import MEMCAIRN, home_with_test_secret, serving  # noqa: E402

from memcairn.core.errors import ConfigError  # noqa: E402
from memcairn.pgstore.embedded import free_port  # noqa: E402
from memcairn.wire.team_client import describe, load_remote  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def self_signed(directory: Path, name: str = "server") -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@contextmanager
def server_process(tmp_path: Path, database: str, url: str, args: list[str], verify: object = True
                   ) -> Iterator[dict[str, str]]:
    home = home_with_test_secret(tmp_path / "home")
    env = {**os.environ, "MEMCAIRN_HOME": str(home)}
    with serving(["server", "--database", database, *args], env, tmp_path / "server.log", url, verify):
        yield env


def make_key(env: dict[str, str], database: str) -> str:
    done = subprocess.run([MEMCAIRN, "server", "keys", "create", "--tenant", "acme", "--database", database,
                           "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["key"])


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MEMCAIRN, *args], env=env, capture_output=True, text=True, timeout=120)


def test_https_from_every_process_and_connect_over_it(tmp_path: Path, pg_database: str) -> None:
    cert, key = self_signed(tmp_path)
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    with server_process(tmp_path, pg_database, url, ["--port", str(port), "--workers", "2", "--tls-cert", str(cert),
                                                     "--tls-key", str(key)], verify=str(cert)) as env:
        api_key = make_key(env, pg_database)
        # new connections are spread over both processes' sockets: every one speaks TLS with this certificate
        for _ in range(12):
            with httpx.Client(verify=str(cert)) as client:
                answer = client.get(f"{url}/v1/projects", headers={"Authorization": f"Bearer {api_key}"})
                assert answer.status_code == 200 and answer.url.scheme == "https"
        with pytest.raises(httpx.TransportError):  # plain HTTP is not served on the port
            httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=5)
        with pytest.raises(httpx.ConnectError):  # nor a certificate the client does not trust
            httpx.get(f"{url}/v1/health", timeout=5)

        local = {**env, "MEMCAIRN_HOME": str(tmp_path / "dev"), "SSL_CERT_FILE": str(cert)}
        done = run(local, "connect", url, "--key", api_key, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["url"] == url and json.loads(done.stdout)["insecure"] is False


def test_a_bad_certificate_pair_is_refused_before_starting(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path, "one")
    _, other_key = self_signed(tmp_path, "two")
    env = {**os.environ, "MEMCAIRN_HOME": str(tmp_path / "home")}
    started = time.monotonic()
    mismatch = run(env, "server", "--embedded", "--port", str(free_port()), "--tls-cert", str(cert), "--tls-key",
                   str(other_key))
    assert mismatch.returncode == 2 and "unencrypted PEM private key that belongs to it" in mismatch.stderr
    half = run(env, "server", "--embedded", "--tls-cert", str(cert))
    assert half.returncode == 2 and "give both --tls-cert FILE and --tls-key FILE" in half.stderr
    missing = run(env, "server", "--embedded", "--tls-cert", str(cert), "--tls-key", str(tmp_path / "nope.key"))
    assert missing.returncode == 2 and "is not a readable file" in missing.stderr
    assert time.monotonic() - started < 30  # no database was started for any of them
    assert not (tmp_path / "home" / "postgres").exists()


def own_address() -> str | None:
    """This machine's address on its network (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.254", 9))
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if ipaddress.ip_address(address).is_loopback else address


def test_plain_http_to_another_machine_needs_insecure(tmp_path: Path, pg_database: str) -> None:
    address = own_address()
    if address is None:
        pytest.skip("no network address other than loopback")
    port = free_port()
    url = f"http://{address}:{port}"
    with server_process(tmp_path, pg_database, url, ["--host", "0.0.0.0", "--port", str(port),
                                                     "--workers", "1"]) as env:
        api_key = make_key(env, pg_database)
        dev = tmp_path / "dev"
        local = {**env, "MEMCAIRN_HOME": str(dev)}
        refused = run(local, "connect", url, "--key", api_key)
        assert refused.returncode != 0 and "plain HTTP to another machine" in refused.stderr
        assert "--insecure" in refused.stderr and "--tls-cert" in refused.stderr
        assert not (dev / "remote.json").exists()
        # this machine by its loopback name needs no flag
        assert run(local, "connect", f"http://127.0.0.1:{port}", "--key", api_key).returncode == 0
        assert load_remote(dev) is not None and load_remote(dev).insecure is False  # type: ignore[union-attr]

        allowed = run(local, "connect", url, "--key", api_key, "--insecure", "--json")
        assert allowed.returncode == 0, allowed.stderr
        assert json.loads((dev / "remote.json").read_text())["insecure"] is True
        link = load_remote(dev)
        assert link is not None and link.url == url and link.insecure

    # a link to plain http:// elsewhere without the flag (written before the check, or by hand): the worker's
    # forwarder and reads (which read the link through load_remote) refuse it, and doctor says why
    (dev / "remote.json").write_text(json.dumps({"url": url, "key": api_key, "project_map": {}}))
    with pytest.raises(ConfigError, match="plain HTTP to another machine"):
        load_remote(dev)
    shown = describe(dev)
    assert shown["state"] == "misconfigured" and "--insecure" in shown["last_error"]
