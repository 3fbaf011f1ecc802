"""Settings come from the environment: the embedded default boots with nothing
set; PostgreSQL and Redis are used when configured."""

import os
import subprocess
import sys
import time

import pytest
from django.core.exceptions import ImproperlyConfigured

from gpuquota.settings import email_settings

PROBE = """
import django, json
django.setup()
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from gpuquota.celery import app
connection.ensure_connection()
cache.set("gpuquota-probe", "ok", 30)
print(json.dumps({
    "vendor": connection.vendor,
    "journal": connection.cursor().execute("PRAGMA journal_mode").fetchone()[0]
        if connection.vendor == "sqlite" else None,
    "cache": settings.CACHES["default"]["BACKEND"],
    "cache_roundtrip": cache.get("gpuquota-probe"),
    "broker": app.conf.broker_url,
    "eager": app.conf.task_always_eager,
    "timezone": app.conf.timezone,
    "email": settings.EMAIL_BACKEND,
}))
"""


def run_probe(tmp_path, **env) -> dict:
    import json

    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "EMAIL_URL", "DEBUG", "SECRET_KEY")
    }
    clean.update(DJANGO_SETTINGS_MODULE="gpuquota.settings", GPUQUOTA_VAR_DIR=str(tmp_path), **env)
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=clean,
        capture_output=True,
        text=True,
        check=True,
        cwd=os.getcwd(),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_embedded_default_needs_nothing(tmp_path):
    probe = run_probe(tmp_path)
    assert probe["vendor"] == "sqlite"
    assert probe["journal"] == "wal"
    assert probe["cache"].endswith("LocMemCache")
    assert probe["eager"] is True
    assert probe["timezone"] == "UTC"
    assert probe["email"].endswith("console.EmailBackend")
    assert (tmp_path / "gpuquota.sqlite3").exists()


@pytest.mark.postgres
@pytest.mark.redis
def test_postgres_and_redis_are_used_when_configured(tmp_path):
    probe = run_probe(
        tmp_path,
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres",
        REDIS_URL=os.environ["REDIS_URL"],
    )
    assert probe["vendor"] == "postgresql"
    assert probe["cache"].endswith("RedisCache")
    assert probe["cache_roundtrip"] == "ok"
    assert probe["broker"].startswith("redis://")
    assert probe["eager"] is False


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as failure:
        run_probe(tmp_path, DEBUG="0")
    assert "SECRET_KEY must be set" in failure.value.stderr


def test_email_url():
    smtp = email_settings("smtp://mailer:s%40cret@mail.example.org:587?tls=1")
    assert smtp["EMAIL_HOST"] == "mail.example.org"
    assert smtp["EMAIL_PORT"] == 587
    assert smtp["EMAIL_HOST_PASSWORD"] == "s@cret"
    assert smtp["EMAIL_USE_TLS"] is True
    assert email_settings("smtps://mail.example.org")["EMAIL_PORT"] == 465
    with pytest.raises(ImproperlyConfigured):
        email_settings("smtp://")
    with pytest.raises(ImproperlyConfigured):
        email_settings("pigeon://coop")


def test_every_app_beat_schedule_is_collected():
    from gpuquota.celery import app, collect_beat_schedule

    schedule = collect_beat_schedule()
    app.finalize()
    assert app.conf.beat_schedule == schedule
    for name, entry in schedule.items():
        assert entry["task"] in app.tasks, f"beat entry {name} names an unknown task"


def _embedded_env(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "EMAIL_URL", "DEBUG", "SECRET_KEY")}
    env.update(DJANGO_SETTINGS_MODULE="gpuquota.settings", GPUQUOTA_VAR_DIR=str(tmp_path / "var"),
               **extra)
    return env


def test_an_eager_task_on_the_embedded_default_logs_no_broker_warning(tmp_path):
    """With no broker, tasks run in process: queueing one (as every mail does) must not make
    kombu log "No hostname was supplied" about a broker that does not exist."""
    script = ("import django; django.setup()\n"
              "from gpuquota.mail.tasks import mail_send_due_task\n"
              "print(mail_send_due_task.delay().get())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=_embedded_env(tmp_path, GPUQUOTA_MAIL_ENABLED="0"),
                          cwd=os.getcwd(), timeout=60, check=True)
    assert "'disabled': True" in done.stdout  # the task ran, in process
    assert "No hostname was supplied" not in done.stderr + done.stdout
    assert "kombu" not in done.stderr


@pytest.mark.timeout(90)
def test_celery_beat_keeps_its_schedule_under_var_not_in_the_working_folder(tmp_path):
    """`celery -A gpuquota worker --beat`, run from a checkout, writes beat's schedule
    state into var/ and nothing into the folder it runs from."""
    from django.conf import settings

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    var = tmp_path / "var"
    env = _embedded_env(tmp_path, PYTHONPATH=str(settings.BASE_DIR))
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "gpuquota", "worker", "--beat", "--pool", "solo",
         "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(var.glob("celerybeat-schedule*")) and time.monotonic() < deadline:
            assert worker.poll() is None, worker.stderr.read()[-2000:]
            assert not list(checkout.iterdir()), list(checkout.iterdir())
            time.sleep(0.2)
        assert list(var.glob("celerybeat-schedule*")), "beat wrote no schedule under var/"
        assert list(checkout.iterdir()) == []
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
