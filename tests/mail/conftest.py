from pathlib import Path

import pytest

TEMPLATES = Path(__file__).parent / "templates"


@pytest.fixture
def test_templates(settings):
    """The template set `test_notice` (tests/mail/templates) next to the product's."""
    settings.TEMPLATES = [
        {**settings.TEMPLATES[0], "DIRS": [*settings.TEMPLATES[0]["DIRS"], TEMPLATES]}
    ]


@pytest.fixture
def celery_eager():
    """Celery tasks run in the test's process (as on the embedded default), even when
    REDIS_URL is set for the suite."""
    from gpuquota.celery import app

    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = previous
