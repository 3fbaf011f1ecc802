"""The database of one simulation run: dropped, created and migrated fresh, then Django set
up on it in this process, with Redis and mail off (tasks run in process)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG = "postgres://postgres@127.0.0.1:5432"


def django_on_fresh_database(name: str, **env: str) -> None:
    """Point this process at a new, migrated PostgreSQL database `name` and set Django up;
    `env` adds settings (e.g. DEBUG)."""
    os.environ.update({"DATABASE_URL": f"{PG}/{name}", "REDIS_URL": "",
                       "GPUQUOTA_MAIL_ENABLED": "0", "LOG_LEVEL": "WARNING",
                       "DJANGO_SETTINGS_MODULE": "gpuquota.settings", **env})
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True)
    import django

    django.setup()
