"""The restore drill of docs/operations.md, "Backup and restore", done for real: a PostgreSQL
database holding encrypted scheduler and telemetry credentials and a node agent's telemetry is
dumped with pg_dump while the agent keeps sending; the dump is restored with pg_restore into a
fresh database; a server on it, with the same three keys, reads the credentials back and
answers its pages, and the batches the agent delivered after the dump come back from its
spool's delivered/ folder (`import_batches`). With other keys the credentials are gone."""

import json
import os
import random
import subprocess
import sys
from datetime import UTC, datetime

import psycopg
import pytest
import time_machine
from django.conf import settings as django_settings

from agent.owners import OwnerResolver
from agent.runner import Agent
from agent.sender import Sender, TokenFile
from agent.simulator import Simulator
from agent.spool import Spool
from gpuquota.ingest.models import Sample
from gpuquota.ingest.services import node_enrol
from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.services import backend_config_update
from gpuquota.telemetry import conf as telemetry_conf
from gpuquota.telemetry.models import SourceKind, TelemetrySource
from gpuquota.telemetry.services import source_save
from tests.agent.conftest import FakeClock
from tests.factories import AdminFactory
from tests.faults.conftest import database_url

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(300)]
#: In the past whatever today's date: the restored server's import runs on the real clock, and
#: import_batches takes batches of any age (the endpoint, frozen at NOW here, up to 8 days).
NOW = datetime(2026, 2, 10, 9, 0, tzinfo=UTC)
KEYS = {"SECRET_KEY": "drill-secret-key-" + "x" * 40,
        "SCHEDULER_CREDENTIALS_KEY": "mYLLJ3ZSdT9vh8eTt0r3yqx5lW2c0b7oOq4h8qkq1kM=",
        "TELEMETRY_SECRET_KEY": "drill-telemetry-key"}
#: Run in `manage.py shell` on the restored database: the credentials, the samples, pages.
CHECK = """
import json
from django.test import Client
from gpuquota.schedulers.models import BackendConfig
from gpuquota.schedulers.secrets import secret_decrypt
from gpuquota.telemetry.models import TelemetrySource
from gpuquota.telemetry.secrets import secret_open
from gpuquota.ingest.models import Sample
try:
    token = secret_decrypt(BackendConfig.objects.get().token_encrypted)
except ValueError as exc:
    token = f"unreadable: {exc}"
client = Client()
client.force_login(__import__("accounts.models").models.User.objects.get(username="drill-admin"))
pages = {path: client.get(path).status_code for path in
         ("/", "/fleet/", "/schedulers/", "/telemetry/sources/", "/statements/review/")}
print(json.dumps({"scheduler_token": token,
                  "telemetry_secret": secret_open(TelemetrySource.objects.get().secret_encrypted),
                  "samples": Sample.objects.count(), "pages": pages}))
"""


def _agent_windows(node: Agent, clock: FakeClock, windows: int) -> None:
    for _ in range(windows):
        start = int(clock.t)
        clock.t += 60
        node.poll()
        node.close_window(start, start + 60)


def _run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "manage.py", *argv], cwd=django_settings.BASE_DIR,
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_a_dump_restores_with_its_secrets_pages_and_the_agents_batches(
        live_server, tmp_path, settings, monkeypatch):
    settings.SECRET_KEY = KEYS["SECRET_KEY"]
    settings.SCHEDULER_CREDENTIALS_KEY = KEYS["SCHEDULER_CREDENTIALS_KEY"]
    monkeypatch.setattr(telemetry_conf, "SECRET_KEY", KEYS["TELEMETRY_SECRET_KEY"])
    admin = AdminFactory(username="drill-admin")
    cluster = Cluster.objects.create(slug="hpc", name="HPC", scheduler="slurm")
    backend_config_update(cluster=cluster, actor=admin, token="slurm-jwt-abc123",
                          mode="off", api_url="http://slurmctl:6820")
    source_save(source=TelemetrySource(name="prom", cluster=cluster,
                                       kind=SourceKind.PROMETHEUS, auth="bearer",
                                       base_url="http://prometheus.example.org:9090"),
                secret="prom-bearer-xyz789", actor=admin)
    issued = node_enrol(cluster=cluster, hostname="gpu-01", actor=None)
    token_file = tmp_path / "node.token"
    token_file.write_text(issued.key)
    token_file.chmod(0o600)
    with time_machine.travel(NOW, tick=False):
        clock = FakeClock(start=NOW.timestamp() - 600)
        spool = Spool(tmp_path / "spool", clock=clock.now, keep_delivered_s=26 * 3600)
        node = Agent(backend=Simulator(2, seed=3, hostname="gpu-01", clock=clock.now),
                     spool=spool, owners=OwnerResolver(str(tmp_path / "proc")),
                     hostname="gpu-01", boot_id="boot-1", window_s=60, clock=clock)
        sender = Sender(spool=spool, server=live_server.url, token=TokenFile(str(token_file)),
                        ca_file=None, clock=clock.now, node_status=node.node_status,
                        rng=random.Random(1), timeout_s=10)
        node.start()
        clock.t = clock.t // 60 * 60
        _agent_windows(node, clock, 2)
        assert sender.drain(lambda _s: True)
        dump = tmp_path / "gpuquota.dump"
        subprocess.run(["pg_dump", "--format=custom", "--file", str(dump), database_url()],
                       check=True, timeout=120)
        _agent_windows(node, clock, 3)  # delivered after the dump: not in it
        assert sender.drain(lambda _s: True)
    assert Sample.objects.count() == 10 and spool.pending() == []
    delivered = sorted(spool.delivered_dir.glob("*.json"))
    assert len(delivered) == 5

    restored = f"{django_settings.DATABASES['default']['NAME']}_restored"
    admin_url = database_url().rsplit("/", 1)[0]
    with psycopg.connect(f"{admin_url}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {restored} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {restored}")
    try:
        subprocess.run(["pg_restore", "--no-owner", "--exit-on-error", "--dbname",
                        f"{admin_url}/{restored}", str(dump)], check=True, timeout=180)
        env = {**os.environ, **KEYS, "DATABASE_URL": f"{admin_url}/{restored}",
               "REDIS_URL": "", "GPUQUOTA_MAIL_ENABLED": "0"}
        _run(["migrate", "--noinput", "-v", "0"], env)  # the same release: nothing to do
        imported = _run(["import_batches", "--node-token-file", str(token_file),
                         *map(str, delivered)], env)
        assert imported.stdout.count("already imported") == 2  # in the dump already
        assert imported.stdout.count(": imported samples=") == 3, imported.stdout
        found = json.loads(_run(["shell", "-c", CHECK], env).stdout.strip().splitlines()[-1])
        assert found["scheduler_token"] == "slurm-jwt-abc123"
        assert found["telemetry_secret"] == "prom-bearer-xyz789"
        assert found["samples"] == 10  # 4 from the dump, 6 given back by the agent's spool
        assert set(found["pages"].values()) == {200}, found["pages"]
        # Without the keys (a restore onto a server whose .env was not kept):
        lost = {**env, "SECRET_KEY": "another-key-" + "y" * 40, "SCHEDULER_CREDENTIALS_KEY": "",
                "TELEMETRY_SECRET_KEY": ""}
        gone = json.loads(_run(["shell", "-c", CHECK], lost).stdout.strip().splitlines()[-1])
        assert gone["scheduler_token"].startswith("unreadable")
        assert gone["telemetry_secret"] == ""
    finally:
        with psycopg.connect(f"{admin_url}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {restored} WITH (FORCE)")
