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


def test_a_provider_that_stops_answering_after_earlier_logins_gets_a_page_of_its_own(
        browser_page, settings):
    """The discovery document of an earlier login is cached; the button must not send the
    browser to a provider that stopped answering (a connection error), but say so."""
    import requests
    from oidc_provider_mock import run_server_in_thread

    from accounts.sso.conf import OidcProvider
    from tests.factories import AdminFactory
    from tests.helpers import browser_login, free_port

    settings.GPUQUOTA_LOCAL_LOGIN_USERS = "root"
    settings.GPUQUOTA_OIDC_TIMEOUT_S = "2"
    AdminFactory(username="root")
    page = browser_page
    _loopback_only(page)
    with run_server_in_thread(port=free_port(), require_nonce=True) as server:
        issuer = f"http://localhost:{server.server_port}"
        settings.GPUQUOTA_OIDC_PROVIDERS = [OidcProvider(
            name="mock", label="Mock SSO", issuer=issuer, client_id="gpuquota",
            client_secret="mock-secret")]
        requests.put(f"{issuer}/users/u-1", json={"preferred_username": "vera"},
                     timeout=10).raise_for_status()
        _log_in_through_provider(page, "u-1")
        page.wait_for_url(lambda url: "/oauth2/" not in url and "/accounts/" not in url)
        page.context.clear_cookies()  # gpuquota's session ends; the provider then stops

    page.goto("/accounts/login/")
    page.click("#sso-mock")

    page.wait_for_selector("#sso-unavailable")
    assert page.locator("h1").inner_text() == "Mock SSO does not answer right now"
    assert "break-glass accounts can still log in" in page.locator("#sso-unavailable").inner_text()
    assert page.url.endswith("/accounts/oidc/mock/login/")  # gpuquota's page, not the dead one
    screenshot(page, "sso-provider-down")
    page.click("#sso-password-login")
    page.wait_for_url("**/accounts/login/")
    browser_login(page, "root")
    assert "/accounts/login/" not in page.url


def test_an_admin_links_a_held_first_login_to_the_existing_account(browser_page,
                                                                   oidc_provider):
    from accounts.models import IdentityLinkRequest
    from tests.factories import AdminFactory, UserFactory
    from tests.helpers import browser_login

    alice = UserFactory(username="alice", email="alice@example.org")
    AdminFactory(username="root")
    oidc_provider.set_user("kc-7", preferred_username="alice", email="alice@example.org",
                           email_verified=True)
    oidc_provider.login("kc-7")
    page = browser_page
    browser_login(page, "root")

    page.goto("/manage/sso/links/")
    row = page.locator("#sso-links tbody tr").first
    assert "alice@example.org" in row.inner_text() and "Waiting for an admin" in \
        row.inner_text()
    screenshot(page, "sso-links-waiting")
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button:has-text('Link to alice')").click()

    page.wait_for_selector(".messages")
    assert "is alice's from now on" in page.locator(".messages").inner_text()
    assert "Nothing waits" in page.locator("#sso-links").inner_text()
    screenshot(page, "sso-links-linked")
    assert ExternalIdentity.objects.get(subject="kc-7").user == alice
    assert IdentityLinkRequest.objects.get().status == "linked"


def test_the_preview_page_shows_who_a_rule_would_refuse_and_what_it_keeps(browser_page,
                                                                          oidc_provider):
    from tests.factories import AdminFactory
    from tests.helpers import browser_login

    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    MappingRule.objects.create(position=1, value="nlp", grant="member", team=nlp,
                               is_billing=True)
    oidc_provider.set_user("kc-a", preferred_username="alice", groups=["nlp"],
                           realm_access={"roles": ["gpu-user"]})
    oidc_provider.set_user("kc-b", preferred_username="bob", realm_access={"roles": ["gpu-user"]})
    oidc_provider.login("kc-a")
    oidc_provider.login("kc-b")
    AdminFactory(username="root")
    page = browser_page
    browser_login(page, "root")

    page.goto("/manage/sso/preview/")
    page.fill("#id_position", "5")
    page.fill("#id_claim", "realm_access.roles")
    page.select_option("#id_match", "equals")
    page.fill("#id_value", "gpu-user")
    page.select_option("#id_grant", "member")
    page.select_option("#id_team", str(vision.pk))
    page.check("#id_is_billing")
    page.click("#sso-preview-form button[type=submit]")

    page.wait_for_selector("#sso-preview")
    rows = {r.locator("td").first.inner_text(): r.inner_text()
            for r in page.locator("#sso-preview tbody tr").all()}
    assert "two billing teams (NLP and Vision)" in rows["alice"]
    assert "member of Vision (billing)" in rows["bob"]
    screenshot(page, "sso-preview-refused")

    page.fill("#id_claim", "realm_access")  # an object: refused with the paths inside it
    page.click("#sso-preview-form button[type=submit]")
    page.wait_for_selector("#sso-preview-form .errors")
    assert "“realm_access.roles”" in page.locator("#sso-preview-form").inner_text()
    screenshot(page, "sso-preview-object-claim")
