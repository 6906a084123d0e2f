"""deploy/compose.yaml's sequence run for real without docker, on the tests' PostgreSQL: the image's init script
makes the application role, the migrate service's command migrates as the owner, a key is made as the compose
file says, and the server service's command, with its environment, serves as the application role (ready, a
memory saved with the key)."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memcairn.pgstore.embedded import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
BIN = Path(sys.executable).parent
_roles = itertools.count(1)


def compose_env(service: dict, values: dict[str, str]) -> dict[str, str]:
    return {k: re.sub(r"\$\{(\w+)[^}]*\}", lambda m: values[m.group(1)], v) for k, v in service["environment"].items()}


def at_test_cluster(url: str, cluster_dsn: str, database: str) -> str:
    """A compose URL (``...@db:5432/memcairn``) pointed at the tests' cluster and database."""
    parts, here = conninfo_to_dict(url), conninfo_to_dict(cluster_dsn)
    return make_conninfo(url, host=here["host"], port=here["port"], dbname=database,
                         **({"password": here["password"]} if parts["user"] == "postgres" else {}))


def test_the_compose_sequence_migrates_then_serves_as_the_app_role(pg_cluster, tmp_path: Path) -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    database = pg_cluster.create_database(template=None)
    role = f"memcairn_app_deploy{os.getpid()}_{next(_roles)}"  # roles are the cluster's: one of this test's own
    psql = sorted(pg_cluster.server._cluster_dir().glob(".pg0/installation/*/bin/psql"))
    if not psql:
        pytest.skip("psql is not in the bundled PostgreSQL")
    here = conninfo_to_dict(pg_cluster.dsn)
    values = {"POSTGRES_PASSWORD": str(here["password"]), "MEMCAIRN_APP_PASSWORD": "app-pw-9d1c",
              "MEMCAIRN_SERVER_METRICS_TOKEN": ""}
    # 1. the init script, as the image runs it (its role renamed for this test)
    script = tmp_path / "init.sh"
    script.write_text((DEPLOY / "initdb" / "10-memcairn-app-role.sh").read_text().replace("memcairn_app", role))
    env = {**os.environ, "PATH": f"{psql[0].parent}:{os.environ['PATH']}", "PGHOST": str(here["host"]),
           "PGPORT": str(here["port"]), "PGPASSWORD": str(here["password"]), "POSTGRES_USER": "postgres",
           "POSTGRES_DB": database, "MEMCAIRN_APP_PASSWORD": values["MEMCAIRN_APP_PASSWORD"]}
    done = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # 2. the migrate service (the owner here is the cluster's superuser, as the image's POSTGRES_USER is)
    home = tmp_path / "home"
    migrate = compose["services"]["migrate"]
    owner = at_test_cluster(compose_env(migrate, values)["MEMCAIRN_SERVER_DATABASE"].replace(
        "memcairn:", "postgres:", 1), pg_cluster.dsn, database)
    owner_env = {**os.environ, "MEMCAIRN_HOME": str(home), "MEMCAIRN_SERVER_DATABASE": owner}
    argv = [str(BIN / "memcairn"), *[a.replace("memcairn_app", role) for a in migrate["command"][1:]]]
    done = subprocess.run(argv, env=owner_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # 3. a key, as the compose file's header says (run in the migrate service: the owner's URL, the same home)
    done = subprocess.run([str(BIN / "memcairn"), "server", "keys", "create", "--tenant", "acme", "--json"],
                          env=owner_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    key = yaml.safe_load(done.stdout)["key"]
    # 4. the server service: its command and environment, the application role's URL
    app = compose["services"]["server"]
    url = compose_env(app, values)["MEMCAIRN_SERVER_DATABASE"].replace("memcairn_app", role)
    port = free_port()
    argv = [str(BIN / "memcairn"), *app["command"][1:]]
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    server_env = {**os.environ, "MEMCAIRN_HOME": str(home),
                  "MEMCAIRN_SERVER_DATABASE": at_test_cluster(url, pg_cluster.dsn, database)}
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        server = subprocess.Popen([*argv, "--workers", "1"], env=server_env, stdout=sink, stderr=sink)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(900):
            assert server.poll() is None, log.read_text(errors="replace")
            try:
                ready = httpx.get(f"{base}/v1/ready", timeout=2)
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            raise AssertionError(log.read_text(errors="replace"))
        assert ready.json()["schema_version"] is not None  # the role reads the migrations' record
        saved = httpx.post(f"{base}/v1/memories", headers={"Authorization": f"Bearer {key}"},
                           json={"project": "api", "title": "compose works", "text": "served as the app role"})
        assert saved.status_code == 201, saved.text
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert "deprecated" not in log.read_text(errors="replace")  # not the owner's URL
    pg_cluster.drop_database(database)
