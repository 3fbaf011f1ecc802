"""A server process loads the routes at boot, not on its first request (the review page's
cold render once paid for importing every view and building the reverse-lookup table)."""

import subprocess
import sys

PROBE = ("import gpuquota.wsgi, sys; from django.urls import get_resolver; "
         "sys.stdout.write(str(get_resolver()._populated and 'reports.views' in sys.modules))")


def test_importing_the_wsgi_application_loads_views_and_reverse_table(tmp_path):
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            timeout=120, check=True, env={
                                "PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE":
                                "gpuquota.settings", "GPUQUOTA_VAR_DIR": str(tmp_path)})
    assert result.stdout.strip().splitlines()[-1] == "True"
