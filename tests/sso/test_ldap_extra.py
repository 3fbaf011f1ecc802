"""The LDAP/AD login is an extra (requirements-ldap.txt): without python-ldap and
django-auth-ldap installed gpuquota starts and logs people in with the LDAP login off, and a
directory configured without them stops the start with what to install."""

import os
import subprocess
import sys

from django.conf import settings

#: manage.py in an interpreter where the LDAP extra cannot be imported, as after
#: `pip install -r requirements.txt` alone.
WITHOUT_LDAP = """
import importlib.abc, runpy, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("ldap", "django_auth_ldap"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NotInstalled())
sys.argv = ["manage.py", *sys.argv[1:]]
runpy.run_path("manage.py", run_name="__main__")
"""

SHOW_BACKENDS = ("from django.contrib.auth import get_backends; import accounts.tasks; "
                 "print([type(b).__name__ for b in get_backends()])")


def _manage(*argv: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUQUOTA_LDAP_")}
    return subprocess.run([sys.executable, "-c", WITHOUT_LDAP, *argv], cwd=settings.BASE_DIR,
                          env={**clean, **env}, capture_output=True, text=True, timeout=120)


def test_without_the_extra_the_product_starts_with_the_ldap_login_off():
    check = _manage("check")
    assert check.returncode == 0, check.stderr
    backends = _manage("shell", "-c", SHOW_BACKENDS)
    assert backends.returncode == 0, backends.stderr
    assert "LocalBackend" in backends.stdout and "OidcBackend" in backends.stdout
    assert "DirectoryBackend" not in backends.stdout


def test_a_directory_configured_without_the_extra_says_what_to_install():
    check = _manage("check", GPUQUOTA_LDAP_SERVER_URI="ldap://ldap.example.org",
                    GPUQUOTA_LDAP_USER_BASE="ou=people,dc=example,dc=org")
    assert check.returncode != 0
    assert "the LDAP extra is not installed" in check.stderr
    assert "pip install -r requirements-ldap.txt" in check.stderr
    assert "libldap-dev" in check.stderr


def test_with_the_extra_the_directory_backend_is_on():
    assert "accounts.sso.ldap.DirectoryBackend" in settings.AUTHENTICATION_BACKENDS
