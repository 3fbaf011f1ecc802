"""What `make demo` gives the commands it runs: the demo's environment (mail to files,
links to its port, a sender in the demo organisation's domain), without running them."""

import logging
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
RECORD = """#!{python}
import json, os, sys
with open({out!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
"""


def _make_demo(tmp_path, **env) -> list[dict]:
    """Run `make demo` with a stand-in interpreter that records each command and its
    environment instead of running it."""
    import json

    out = tmp_path / "commands.jsonl"
    python = tmp_path / "python"
    python.write_text(RECORD.format(python=sys.executable, out=str(out)))
    python.chmod(0o755)
    # A stand-in for the venv's marker, newer than requirements.txt whatever a checkout's
    # file times are, so that make never runs the install step with the stand-in.
    installed = tmp_path / "installed"
    installed.touch()
    clean = {k: v for k, v in os.environ.items()
             if k not in ("DEFAULT_FROM_EMAIL", "EMAIL_URL", "GPUQUOTA_BASE_URL",
                          "USAGE_ROLLUP_FRESHNESS_S")}
    subprocess.run(["make", "--no-print-directory", "demo", f"PY={python}",
                    f"INSTALLED={installed}", "PORT=8123"], cwd=ROOT, env={**clean, **env},
                   check=True, timeout=60, capture_output=True)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_make_demo_mails_from_the_demo_domain_to_files_with_links_to_its_port(tmp_path):
    commands = _make_demo(tmp_path)
    assert [c["argv"][:2] for c in commands] == [
        ["manage.py", "migrate"], ["manage.py", "seed_demo"], ["manage.py", "demo"]]
    for command in commands:
        env = command["env"]
        assert env["DEFAULT_FROM_EMAIL"] == "gpuquota demo <gpuquota@example.org>"
        assert "localhost" not in env["DEFAULT_FROM_EMAIL"]
        assert env["EMAIL_URL"] == "file://var/mail"
        assert env["GPUQUOTA_BASE_URL"] == "http://127.0.0.1:8123"
        assert env["USAGE_ROLLUP_FRESHNESS_S"] == "60"  # its agents report every 10 s


def test_what_the_user_sets_wins(tmp_path):
    [_migrate, _seed, demo] = _make_demo(tmp_path, DEFAULT_FROM_EMAIL="ops <gpu@example.com>")
    assert demo["env"]["DEFAULT_FROM_EMAIL"] == "ops <gpu@example.com>"


def test_make_demo_slurm_runs_the_demo_with_the_dev_slurm_cluster(tmp_path):
    [_migrate, _seed, demo] = _make_demo(tmp_path, SLURM="1")
    assert demo["argv"] == ["manage.py", "slurm_demo", "--addr", "127.0.0.1:8123"]


def test_the_demo_logs_failed_logins_only(tmp_path):
    """Three axes lines per login drowned the demo's banner: it logs failures only."""
    for command in _make_demo(tmp_path):
        assert command["env"]["LOGIN_LOG_LEVEL"] == "WARNING"
    script = ("import logging, django; django.setup(); "
              "print(logging.getLogger('axes.handlers.database').getEffectiveLevel())")
    env = {**os.environ, "LOGIN_LOG_LEVEL": "WARNING", "DJANGO_SETTINGS_MODULE":
           "gpuquota.settings"}
    level = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True,
                           capture_output=True, text=True, timeout=60).stdout.split()[-1]
    assert int(level) == logging.WARNING
