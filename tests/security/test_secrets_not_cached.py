"""A page that shows a token's secret (a personal API token, a node token) tells browsers and
proxies never to store it: `Cache-Control: no-store` (with Django's never_cache set)."""

import pytest
from django.test import Client

from tests.factories import ClusterFactory, NodeFactory

pytestmark = [pytest.mark.django_db]


def _assert_secret_not_cacheable(response, prefix: str) -> None:
    assert response.status_code == 200
    assert 'id="new-token-key"' in response.content.decode()
    assert prefix in response.content.decode()
    directives = {d.strip() for d in response["Cache-Control"].split(",")}
    assert {"no-store", "no-cache", "private", "max-age=0"} <= directives, directives
    assert "Expires" in response


def test_the_new_personal_token_page_is_not_cacheable(roles):
    client = Client()
    client.force_login(roles.member)
    shown = client.post("/accounts/profile/tokens/", {"name": "laptop"}, follow=True)
    _assert_secret_not_cacheable(shown, "gqu_")
    again = client.get("/accounts/profile/")  # shown once; the page stays uncacheable
    assert 'id="new-token-key"' not in again.content.decode()
    assert "no-store" in again["Cache-Control"]


def test_the_node_token_pages_are_not_cacheable(roles):
    client = Client()
    client.force_login(roles.admin)
    cluster = ClusterFactory()
    enrolled = client.post("/ingest/nodes/", {"cluster": cluster.pk, "hostname": "gpu-new"},
                           follow=True)
    _assert_secret_not_cacheable(enrolled, "gqn_")
    node = NodeFactory(cluster=cluster)
    rotated = client.post(f"/ingest/nodes/{node.pk}/rotate", follow=True)
    _assert_secret_not_cacheable(rotated, "gqn_")
