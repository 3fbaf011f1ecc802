"""The API's groups are named in the product's words, each with what it holds: no area
falls back to its path segment capitalised ("Sso")."""

import pytest
import yaml
from django.test import Client

from gpuquota.core.schema import AREA_DESCRIPTIONS

pytestmark = pytest.mark.django_db


def test_every_api_tag_is_a_described_area():
    schema = yaml.safe_load(Client().get("/api/schema/").content)
    tags = [tag["name"] for tag in schema["tags"]]
    assert "Single sign-on" in tags and "Sso" not in tags
    assert set(tags) <= set(AREA_DESCRIPTIONS)
    assert all(tag.get("description") for tag in schema["tags"])
