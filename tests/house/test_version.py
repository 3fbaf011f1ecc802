"""One version number (docs/operations.md, "Upgrades"): written in agent/__init__.py only,
read by the server, its API schema and pyproject.toml, and matched by the images the
manifests and docs name and by the CHANGELOG's latest release."""

import re
import tomllib
from pathlib import Path

from django.conf import settings

import agent

ROOT = Path(settings.BASE_DIR)
IMAGE_TAG = re.compile(r"gpuquota(?:-agent)?:(\d+\.\d+\.\d+)")
VERSION_LITERAL = re.compile(r"""(?:__version__|"VERSION"|^version)\s*[=:]\s*["']\d""", re.M)


def test_the_version_is_written_once():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "agent.__version__"}
    assert settings.GPUQUOTA_VERSION == agent.__version__
    assert settings.SPECTACULAR_SETTINGS["VERSION"] == agent.__version__
    written = [str(path.relative_to(ROOT)) for package in ("gpuquota", "accounts", "reports",
                                                         "reclaim", "agent", "bench")
               for path in (ROOT / package).rglob("*.py")
               if VERSION_LITERAL.search(path.read_text())]
    assert written == ["agent/__init__.py"]
    assert not VERSION_LITERAL.search((ROOT / "pyproject.toml").read_text())


def test_images_and_the_changelog_name_the_version():
    files = [*(ROOT / "deploy").rglob("*.y*ml"), *(ROOT / "deploy").rglob("Dockerfile"),
             *(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
    tags = {f"{path.relative_to(ROOT)}: {tag}" for path in files
            for tag in IMAGE_TAG.findall(path.read_text()) if tag != agent.__version__}
    assert tags == set()
    releases = re.findall(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases[0] == agent.__version__
