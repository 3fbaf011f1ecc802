"""`make demo SSO=1`: the demo's loopback provider and rules make `vlead` Vision's lead
through a groups claim and `vmember` a member; the claim removed, the lead membership
ends at the next login, on the team page and in the audit log."""

from urllib.parse import urlparse

import pytest
import requests
from django.test import Client

from accounts.models import Membership, User
from accounts.sso.demo import demo_provider_running, demo_rules_seed
from gpuquota.core.models import AuditEntry
from gpuquota.demo.organisation import demo_organisation_seed
from tests.helpers import free_port

pytestmark = [pytest.mark.sso, pytest.mark.django_db]
ENV = ["GPUQUOTA_OIDC_PROVIDERS", "GPUQUOTA_OIDC_DEMO_LABEL", "GPUQUOTA_OIDC_DEMO_ISSUER",
       "GPUQUOTA_OIDC_DEMO_CLIENT_ID", "GPUQUOTA_OIDC_DEMO_CLIENT_SECRET"]


@pytest.fixture
def demo_provider(monkeypatch):
    for name in ENV:  # restored after the test
        monkeypatch.delenv(name, raising=False)
    demo_organisation_seed()
    demo_rules_seed()
    demo_rules_seed()  # idempotent
    with demo_provider_running(port=free_port()) as issuer:
        yield issuer


def _login(sub: str) -> Client:
    client = Client()
    authorize = client.get("/accounts/oidc/demo/login/")["Location"]
    answer = requests.post(authorize, data={"sub": sub}, allow_redirects=False, timeout=10)
    callback = urlparse(answer.headers["Location"])
    assert callback.path == "/accounts/oidc/callback/"
    assert client.get(f"{callback.path}?{callback.query}")["Location"] == "/"
    return client


def test_the_demo_provider_makes_vlead_visions_lead_and_ends_it_with_the_claim(demo_provider):
    lead_client = _login("vlead")
    assert lead_client.get("/")["Location"] == "/teams/vision/"
    vlead = User.objects.get(username="vlead")
    assert Membership.objects.get(user=vlead, team__slug="vision").role == "lead"
    _login("vmember")
    assert Membership.objects.get(user__username="vmember", team__slug="vision").role == \
        "member"
    team_page = lead_client.get("/teams/vision/").content.decode()
    assert "Vanya Lead" in team_page and "by sign-in rules" in team_page

    requests.put(f"{demo_provider}/users/vlead", timeout=10, json={
        "preferred_username": "vlead", "email": "vlead@example.org", "groups": ["vision"]})
    _login("vlead")

    ended = Membership.objects.get(user=vlead, team__slug="vision", role="lead")
    assert ended.valid_until is not None
    assert Membership.objects.get(user=vlead, team__slug="vision",
                                  valid_until__isnull=True).role == "member"
    assert AuditEntry.objects.filter(action="sso.login", changes__ended=["lead of Vision"]
                                     ).exists()
    assert "Member" in _login("vlead").get("/teams/vision/").content.decode()


def test_make_demo_sso_runs_the_demo_beside_the_loopback_provider(tmp_path):
    from tests.demo.test_make import _make_demo

    commands = _make_demo(tmp_path, SSO="1")
    assert commands[-1]["argv"] == ["manage.py", "demo_sso", "--provider-port", "8900",
                                    "--addr", "127.0.0.1:8123"]


def test_demo_sso_serves_the_provider_while_the_demo_runs(monkeypatch):
    """The command's own work, the demo it hands over to recorded instead of served."""
    from django.core.management import call_command

    from accounts.management.commands import demo_sso

    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    demo_organisation_seed()
    seen = {}

    def demo(name, **options):
        import os
        issuer = os.environ["GPUQUOTA_OIDC_DEMO_ISSUER"]
        seen.update(name=name, options=options, discovery=requests.get(
            f"{issuer}/.well-known/openid-configuration", timeout=10).json()["issuer"],
            issuer=issuer)

    monkeypatch.setattr(demo_sso, "call_command", demo)
    call_command("demo_sso", addr="127.0.0.1:8124", provider_port=free_port())
    assert seen["name"] == "demo" and seen["options"] == {"addr": "127.0.0.1:8124"}
    assert seen["discovery"] == seen["issuer"]
    assert {r.value for r in demo_rules_seed()} == {"vision-leads", "vision"}
