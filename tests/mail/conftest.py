from pathlib import Path

import pytest

TEMPLATES = Path(__file__).parent / "templates"


@pytest.fixture
def test_templates(settings):
    """The template set `test_notice` (tests/mail/templates) next to the product's."""
    settings.TEMPLATES = [
        {**settings.TEMPLATES[0], "DIRS": [*settings.TEMPLATES[0]["DIRS"], TEMPLATES]}
    ]

