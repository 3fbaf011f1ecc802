"""The whole OpenID Connect login in Debian's chromium against oidc-provider-mock on
loopback: the button, the provider's page, the callback, the landing page with the team
and role the `groups` claim gives; the claim removed, the next login ends the membership;
logout ends the provider's session too."""

import pytest

from accounts.models import ExternalIdentity, MappingRule, Membership, User
from gpuquota.core.models import AuditEntry
from tests.factories import TeamFactory
from tests.helpers import screenshot

pytestmark = [pytest.mark.sso, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _loopback_only(page) -> None:
    """Nothing leaves loopback (the mock's page links a stylesheet on a CDN)."""
    def route(route):
        host = route.request.url.split("/")[2].split(":")[0]
        if host in ("localhost", "127.0.0.1"):
            route.continue_()
        else:
            route.abort()
    page.context.route("**/*", route)


def _log_in_through_provider(page, sub: str) -> None:
    page.goto("/accounts/login/")
    page.click("#sso-mock")
    page.wait_for_url("**/oauth2/authorize**")
    page.fill("input[name=sub]", sub)
    page.click("button[type=submit]:has-text('Authorize')")


def test_a_groups_claim_makes_a_lead_and_its_removal_ends_the_membership(browser_page,
                                                                       oidc_provider):
    vision = TeamFactory(slug="vision", name="Vision")
    MappingRule.objects.create(position=1, value="vision-leads", grant="lead", team=vision)
    MappingRule.objects.create(position=2, value="vision", grant="member", team=vision)
    oidc_provider.set_user("u-4711", groups=["vision-leads", "vision"],
                           preferred_username="vlead", email="vlead@example.org",
                           given_name="Vera", family_name="Lead")
    page = browser_page
    _loopback_only(page)

    _log_in_through_provider(page, "u-4711")

    page.wait_for_url("**/teams/vision/")
    assert page.locator("h1").first.inner_text() == "Vision"
    user = User.objects.get(external_identities__subject="u-4711")
    assert (user.username, user.email, user.first_name) == ("vlead", "vlead@example.org",
                                                            "Vera")
    identity = ExternalIdentity.objects.get(user=user)
    assert identity.issuer == oidc_provider.url and identity.provider == "mock"
    lead = Membership.objects.get(user=user, team=vision)
    assert (lead.role, lead.source, lead.valid_until) == ("lead", "rules", None)
    screenshot(page, "sso-oidc-lead-landing")

    page.click("text=Log out")  # RP-initiated logout: the provider's page, then back
    page.wait_for_url("**/oauth2/end_session**")
    assert "id_token_hint" in page.url

    oidc_provider.set_user("u-4711", groups=["vision"], preferred_username="vlead",
                           email="vlead@example.org")
    page.goto("/accounts/login/")
    page.click("#sso-mock")
    page.wait_for_url("**/oauth2/authorize**")
    page.fill("input[name=sub]", "u-4711")
    page.click("button[type=submit]:has-text('Authorize')")
    page.wait_for_url("**/teams/vision/")

    lead.refresh_from_db()
    assert lead.valid_until is not None
    member = Membership.objects.get(user=user, team=vision, valid_until__isnull=True)
    assert member.role == "member"
    assert User.objects.filter(external_identities__subject="u-4711").count() == 1
    entry = AuditEntry.objects.filter(action="sso.login", object_id=str(user.pk)).latest("at")
    assert entry.changes["ended"] == ["lead of Vision"]
    assert entry.changes["started"] == ["member of Vision"]


def test_a_provider_that_is_down_is_said_so_and_break_glass_still_logs_in(browser_page,
                                                                          settings):
    from accounts.sso.conf import OidcProvider
    from tests.factories import AdminFactory
    from tests.helpers import browser_login, free_port

    settings.GPUQUOTA_OIDC_PROVIDERS = [OidcProvider(
        name="mock", label="Mock SSO", issuer=f"http://127.0.0.1:{free_port()}",
        client_id="gpuquota", client_secret="x")]
    settings.GPUQUOTA_LOCAL_LOGIN_USERS = "root"
    settings.GPUQUOTA_OIDC_TIMEOUT_S = "2"
    AdminFactory(username="root")
    page = browser_page
    page.goto("/accounts/login/")
    page.click("#sso-mock")
    page.wait_for_url("**/accounts/login/")
    assert "Mock SSO does not answer right now" in page.locator(".messages").inner_text()

    browser_login(page, "root")
    assert "/accounts/login/" not in page.url
