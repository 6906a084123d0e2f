"""deploy/: the Dockerfile, the compose file and the systemd unit parse, and every command line they run is a
valid ``memcairn server`` invocation by the CLI's own parser (docker cannot run here; systemd-analyze can)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from memcairn.cli.server_cmds import server

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
MEMCAIRN = Path(sys.executable).parent / "memcairn"


def server_params(argv: list[str], env: dict[str, str] | None = None,
                  monkeypatch: pytest.MonkeyPatch | None = None) -> dict[str, Any]:
    """``argv`` (``memcairn server ...``) parsed by the CLI, with the environment it runs in; the rule the
    command enforces (one of --embedded or a database) checked too."""
    assert argv[:2] == ["memcairn", "server"], argv
    if monkeypatch is not None:
        monkeypatch.delenv("MEMCAIRN_SERVER_DATABASE", raising=False)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
    ctx = server.make_context("server", list(argv[2:]))
    params = dict(ctx.params)
    assert params["embedded"] != bool(params["database"]), f"{argv} names no database (or two)"
    return params


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    found = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_the_dockerfile_installs_the_server_extra_and_runs_memcairn_server(monkeypatch) -> None:
    steps = dockerfile_instructions((DEPLOY / "Dockerfile").read_text())
    known = {"FROM", "ENV", "COPY", "RUN", "VOLUME", "USER", "EXPOSE", "HEALTHCHECK", "CMD", "WORKDIR", "ARG"}
    assert {word for word, _ in steps} <= known
    assert steps[0] == ("FROM", "python:3.11-slim")
    assert any(word == "RUN" and '[server]"' in rest and "pip install" in rest for word, rest in steps)
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(rest for word, rest in steps if word == "ENV")))
    cmd = json.loads(next(rest for word, rest in steps if word == "CMD"))
    params = server_params(cmd, {"MEMCAIRN_SERVER_DATABASE": "postgresql://u:p@db/memcairn"}, monkeypatch)
    assert params["host"] == "0.0.0.0" and str(params["port"]) in " ".join(r for w, r in steps if w == "EXPOSE")
    assert env["MEMCAIRN_HOME"] in next(rest for word, rest in steps if word == "VOLUME")
    health = next(rest for word, rest in steps if word == "HEALTHCHECK")
    probe = json.loads(health[health.index("CMD") + 3:].strip())
    assert probe[:2] == ["python", "-c"] and "/v1/ready" in probe[2]
    compile(probe[2], "HEALTHCHECK", "exec")  # the probe is Python that runs
    assert (DEPLOY / "Dockerfile.dockerignore").read_text().count(".venv")


def compose_services() -> tuple[dict[str, Any], dict[str, str]]:
    """compose.yaml, and env.example's values (what deploy/.env is made from)."""
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    example = dict(line.split("=", 1) for line in (DEPLOY / "env.example").read_text().splitlines()
                   if line and not line.startswith("#"))
    return compose, example


def environment_of(service: dict[str, Any], example: dict[str, str]) -> dict[str, str]:
    return {k: re.sub(r"\$\{(\w+)[^}]*\}", lambda m: example[m.group(1)], v) for k, v in service["environment"].items()}


def subcommand_params(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``memcairn server SUBCOMMAND ...`` parsed by the CLI."""
    assert argv[:2] == ["memcairn", "server"], argv
    monkeypatch.delenv("MEMCAIRN_SERVER_DATABASE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    command = server.get_command(click.Context(server), argv[2])
    assert command is not None, f"no command memcairn server {argv[2]}"
    return dict(command.make_context(argv[2], list(argv[3:])).params)


def test_the_compose_file_migrates_as_the_owner_and_serves_as_the_app_role(monkeypatch) -> None:
    compose, example = compose_services()
    db, migrate, app = (compose["services"][name] for name in ("db", "migrate", "server"))
    assert db["image"].startswith("pgvector/pgvector:pg")
    assert (DEPLOY / migrate["build"]["context"] / migrate["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    assert app["image"] == migrate["image"]
    assert migrate["depends_on"]["db"]["condition"] == "service_healthy"
    assert app["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "./initdb:/docker-entrypoint-initdb.d:ro" in db["volumes"]
    # every ${VAR} the file reads is set in env.example
    assert set(re.findall(r"\$\{(\w+)", (DEPLOY / "compose.yaml").read_text())) <= set(example)
    owner = subcommand_params(migrate["command"], environment_of(migrate, example), monkeypatch)
    assert owner["database"] == (f"postgresql://{db['environment']['POSTGRES_USER']}:{example['POSTGRES_PASSWORD']}"
                                 f"@db:5432/{db['environment']['POSTGRES_DB']}")
    params = server_params(app["command"], environment_of(app, example), monkeypatch)
    assert params["database"] == (f"postgresql://{owner['app_role']}:{example['MEMCAIRN_APP_PASSWORD']}"
                                  f"@db:5432/{db['environment']['POSTGRES_DB']}")
    assert owner["app_role"] in (DEPLOY / "initdb" / "10-memcairn-app-role.sh").read_text()
    assert app["ports"] == [f"127.0.0.1:{params['port']}:{params['port']}"]
    home = {v for v in app["volumes"]}
    assert home == set(migrate["volumes"])  # the same secret for the keys the owner makes and the server checks
    volumes = {v.split(":")[0] for service in compose["services"].values() for v in service.get("volumes", [])}
    assert volumes - {"./initdb"} == set(compose["volumes"])
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        done = subprocess.run(["docker", "compose", "-f", str(DEPLOY / "compose.yaml"), "config", "-q"],
                              capture_output=True, text=True, env={**example, "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr


def unit_sections(text: str) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            current[key.strip()] = value.strip()
    return sections


def test_the_systemd_unit_runs_a_valid_server_command_and_passes_systemd_analyze(tmp_path, monkeypatch) -> None:
    text = (DEPLOY / "memcairn-server.service").read_text()
    unit = unit_sections(text)
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == "/opt/memcairn/bin/memcairn"
    params = server_params(["memcairn", *argv[1:]], {"MEMCAIRN_SERVER_DATABASE": "postgresql://u:p@h/db"},
                           monkeypatch)
    assert params["host"] == "127.0.0.1"
    assert service["Environment"] == "MEMCAIRN_HOME=/var/lib/memcairn" and service["StateDirectory"] == "memcairn"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    env_file = tmp_path / "server.env"
    env_file.write_text("MEMCAIRN_SERVER_DATABASE=postgresql://u:p@h/db\n")

    def verify(unit_text: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "memcairn-server.service"
        path.write_text(unit_text.replace("/opt/memcairn/bin/memcairn", str(MEMCAIRN))
                        .replace("/etc/memcairn/server.env", str(env_file)))
        return subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)

    done = verify(text)
    assert done.returncode == 0 and "memcairn-server.service" not in done.stderr, done.stderr
    broken = verify(text.replace("RestartSec=5", "RestartSec=soon"))  # the check can fail
    assert "memcairn-server.service" in broken.stderr


def test_a_command_line_the_cli_refuses_is_caught() -> None:
    with pytest.raises(click.UsageError):
        server.make_context("server", ["--host", "0.0.0.0", "--port", "not-a-port"])
