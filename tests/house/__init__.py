"""The house rules: layering, docs, sections."""

from pathlib import Path

import gpuquota

ROOT = Path(gpuquota.__file__).resolve().parent.parent


def project_app_configs() -> list:
    """The installed apps whose code is this checkout's own: not those of the virtualenv,
    which CI and `make` keep inside the checkout (`.venv/`)."""
    from django.apps import apps

    found = []
    for config in apps.get_app_configs():
        path = Path(config.path).resolve()
        if path.is_relative_to(ROOT) and ".venv" not in path.relative_to(ROOT).parts:
            found.append(config)
    return found
