"""The nodes page: admins only; tokens shown once; rotate and revoke."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from gpuquota.ingest.models import NodeToken
from gpuquota.ingest.selectors import node_for_token
from gpuquota.inventory.models import Node
from tests.factories import ClusterFactory
from tests.helpers import browser_login, screenshot
from tests.ingest.factories import enrolled

NODES = "/ingest/nodes/"


def client_for(user) -> Client:
    client = Client()
    if user.is_authenticated:
        client.force_login(user)
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("role, status", [("admin", 200), ("lead", 404), ("other_lead", 404),
                                          ("member", 404), ("outsider", 404),
                                          ("anonymous", 404)])
def test_nodes_page_is_for_admins_only(roles, role, status):
    node = enrolled().node
    client = client_for(roles.users()[role])
    assert client.get(NODES).status_code == status
    done = 302 if status == 200 else 404
    assert client.post(NODES, {"new_cluster": "x", "hostname": "h"}).status_code == done
    for name in ("ingest_node_rotate", "ingest_node_revoke"):
        assert client.post(reverse(name, args=[node.pk])).status_code == done
    if status == 404:
        assert Node.objects.count() == 1
        assert NodeToken.objects.filter(revoked_at__isnull=True).count() == 1


@pytest.mark.django_db
def test_non_admins_cannot_rotate_or_revoke(roles):
    issued = enrolled()
    for role in ("lead", "member", "outsider", "anonymous"):
        client = client_for(roles.users()[role])
        client.post(reverse("ingest_node_rotate", args=[issued.node.pk]))
        client.post(reverse("ingest_node_revoke", args=[issued.node.pk]))
    assert node_for_token(key=issued.key) == issued.node


def shown_token(html: str) -> str | None:
    found = re.search(r'id="new-token-key">(gqn_[^<]+)<', html)
    return found.group(1) if found else None


@pytest.mark.django_db
def test_admin_enrols_a_node_and_sees_the_token_once(roles):
    client = client_for(roles.admin)
    cluster = ClusterFactory(name="Hopper", slug="hopper")
    response = client.post(NODES, {"cluster": cluster.pk, "hostname": "gpu-01"}, follow=True)
    key = shown_token(response.content.decode())
    assert key and node_for_token(key=key).hostname == "gpu-01"
    assert shown_token(client.get(NODES).content.decode()) is None  # never again
    assert key[:10] in client.get(NODES).content.decode()  # the prefix stays listed


@pytest.mark.django_db
def test_admin_enrols_in_a_new_cluster_and_errors_are_shown(roles):
    client = client_for(roles.admin)
    response = client.post(NODES, {"new_cluster": "Blackwell", "hostname": "b-01"}, follow=True)
    assert shown_token(response.content.decode())
    assert Node.objects.get(hostname="b-01").cluster.slug == "blackwell"
    again = client.post(NODES, {"new_cluster": "Blackwell", "hostname": "b-01"})
    assert again.status_code == 200 and "already enrolled" in again.content.decode()
    missing = client.post(NODES, {"hostname": "b-02"})
    assert "Choose a cluster" in missing.content.decode()


@pytest.mark.django_db
def test_admin_rotates_and_revokes(roles):
    issued = enrolled()
    client = client_for(roles.admin)
    response = client.post(reverse("ingest_node_rotate", args=[issued.node.pk]), follow=True)
    new_key = shown_token(response.content.decode())
    assert new_key and new_key != issued.key
    assert node_for_token(key=issued.key) is None and node_for_token(key=new_key)
    client.post(reverse("ingest_node_revoke", args=[issued.node.pk]), follow=True)
    assert node_for_token(key=new_key) is None
    assert "no live token" in client.get(NODES).content.decode()


@pytest.mark.django_db
def test_clock_skew_over_30_seconds_is_flagged(roles):
    skewed, fine = enrolled("skewed").node, enrolled("fine").node
    Node.objects.filter(pk=skewed.pk).update(clock_skew_s=-42.0)
    Node.objects.filter(pk=fine.pk).update(clock_skew_s=2.0)
    html = client_for(roles.admin).get(NODES).content.decode()
    rows = {name: html[html.index(f"/{name}</td>"):][:900] for name in ("skewed", "fine")}
    assert "skewed</span>" in rows["skewed"] and "skewed</span>" not in rows["fine"]


@pytest.mark.django_db
def test_nav_link_only_for_admins(roles):
    assert f'href="{NODES}"' in client_for(roles.admin).get("/").content.decode()
    assert f'href="{NODES}"' not in client_for(roles.lead).get("/", follow=True).content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_admin_enrols_a_node_in_the_browser(browser_page):
    from tests.factories import AdminFactory

    AdminFactory(username="root-admin")
    ClusterFactory(name="Hopper", slug="hopper")
    page = browser_page
    browser_login(page, "root-admin")
    page.click("#nav-operations summary")  # the admin pages are in menus
    page.click("#nav-operations >> text=Nodes")
    page.wait_for_url("**/ingest/nodes/")
    page.select_option("#id_cluster", label="Hopper")
    page.fill("#id_hostname", "gpu-node-07")
    page.click("text=Create node and token")
    page.wait_for_load_state("networkidle")
    key = page.locator("#new-token-key").inner_text()
    assert key.startswith("gqn_")
    screenshot(page, "ingest-nodes-new-token")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("text=Revoke")
    page.wait_for_load_state("networkidle")
    assert page.get_by_text("no live token").is_visible()
    screenshot(page, "ingest-nodes-revoked")
