"""The runtime (requirements.txt) is all the product needs: `make demo` and the image install
only it, `make test` adds requirements-dev.txt (the tests' and tools' packages and the LDAP
extra)."""

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
#: Top-level modules of the packages that only requirements-dev.txt installs.
DEV_ONLY = ("pytest", "xdist", "pytest_django", "pytest_timeout", "factory", "time_machine",
            "playwright", "ruff", "aiosmtpd", "schemathesis", "hypothesis", "pypdf",
            "kubernetes_validate", "celpy", "oidc_provider_mock", "ldap", "django_auth_ldap")
#: Product modules that are development tools themselves, and the LDAP extra's backend.
DEV_TOOLS = ("gpuquota.schedulers.kubernetes.fake_apiserver",
             "gpuquota.schedulers.kubernetes.management.commands.kubernetes_fake_apiserver",
             "accounts.sso.ldap")
IMPORT_ALL = """
import importlib, importlib.abc, pkgutil, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {dev_only!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

sys.meta_path.insert(0, NotInstalled())
import django
django.setup()
failed = []
for package in ("gpuquota", "accounts", "reports", "reclaim", "agent"):
    root = importlib.import_module(package)
    for module in pkgutil.walk_packages(root.__path__, package + "."):
        name = module.name
        if ".migrations." in name or name.endswith(".__main__") or name.startswith({dev_tools!r}):
            continue
        try:
            importlib.import_module(name)
        except ImportError as exc:
            failed.append(f"{{name}}: {{exc}}")
print("\\n".join(failed) or "all imported")
"""


def _requirements(name: str) -> set[str]:
    names = set()
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-r"):
            names.add(line.split("==")[0].split("[")[0].lower())
    return names


def test_every_product_module_imports_with_the_runtime_alone():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gpuquota.settings"}
    env.pop("GPUQUOTA_LDAP_SERVER_URI", None)
    script = IMPORT_ALL.format(dev_only=DEV_ONLY, dev_tools=DEV_TOOLS)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("all imported"), result.stdout


def test_the_runtime_holds_no_test_or_tool_package_and_dev_adds_them():
    runtime, ldap = _requirements("requirements.txt"), _requirements("requirements-ldap.txt")
    dev = _requirements("requirements-dev.txt")
    for tool in ("pytest", "playwright", "ruff", "schemathesis", "factory-boy", "time-machine",
                 "kubernetes-validate", "oidc-provider-mock", "python-ldap"):
        assert tool not in runtime
    assert {"pytest", "playwright", "ruff"} <= dev and ldap == {"python-ldap",
                                                                 "django-auth-ldap"}
    dev_text = (ROOT / "requirements-dev.txt").read_text()
    assert "-r requirements.txt" in dev_text and "-r requirements-ldap.txt" in dev_text


def _make_dry_run(target: str, tmp_path) -> str:
    venv = tmp_path / "venv"
    result = subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={venv}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return result.stdout


def test_make_demo_installs_the_runtime_and_make_test_adds_the_rest(tmp_path):
    demo = _make_dry_run("demo", tmp_path)
    assert "-r requirements.txt" in demo and "requirements-dev.txt" not in demo
    test = _make_dry_run("test", tmp_path)
    assert "-r requirements.txt" in test and "-r requirements-dev.txt" in test


def test_the_image_installs_the_runtime_and_the_ldap_extra_only_when_asked():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "-r requirements.txt" in dockerfile and "requirements-dev.txt" not in dockerfile
    assert 'if [ "$LDAP" = "1" ]' in dockerfile
