"""docker-compose.yml for Compose v2 (no obsolete `version:`), and the first admin after
`docker compose up`: the migrate service's own command, run here against the test database,
creates the admin that .env names, who then logs in."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings as django_settings
from django.test import Client

from accounts.models import User
from tests.helpers import suite_database_url

ROOT = Path(django_settings.BASE_DIR)
COMPOSE = ROOT / "docker-compose.yml"


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_the_compose_file_has_no_obsolete_version_and_the_docs_use_compose_v2():
    assert "version" not in _compose()
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    v1 = [f"{path.name}: {line.strip()}" for path in docs
          for line in path.read_text().splitlines() if "docker-compose up" in line
          or "docker-compose run" in line]
    assert v1 == []


def test_the_image_is_built_with_the_ldap_extra_only_when_env_asks():
    assert _compose()["x-app"]["build"]["args"]["LDAP"] == "${GPUQUOTA_LDAP:-0}"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_migrate_service_creates_the_admin_env_names(tmp_path, settings):
    # The process hashes with the product's hashers; the suite's speed-up knows only MD5.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    migrate = _compose()["services"]["migrate"]
    shell, flag, script = migrate["command"]
    assert migrate["environment"]["GPUQUOTA_ADMIN"] == "${GPUQUOTA_ADMIN:-}"
    # Compose turns `$$` into `$` for the container's shell; `python` is this interpreter.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "DATABASE_URL": suite_database_url(), "GPUQUOTA_ADMIN": "ops",
           "GPUQUOTA_ADMIN_PASSWORD": "first-day-secret"}
    for _ in range(2):  # a restart of the stack keeps the admin as it is
        done = subprocess.run([shell, flag, script.replace("$$", "$")], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    assert "admin ops: kept" in done.stdout
    assert User.objects.get(username="ops").is_staff
    response = Client().post("/accounts/login/", {"username": "ops",
                                                  "password": "first-day-secret"})
    assert response.status_code == 302
    env.pop("GPUQUOTA_ADMIN")
    done = subprocess.run([shell, flag, script.replace("$$", "$")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "bootstrap" not in done.stdout and "Done." not in done.stdout
