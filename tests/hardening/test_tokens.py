"""Self-service personal API tokens: one service issues and revokes them, the profile
page lists them, the Django admin only reads them and revokes through the service."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import ApiToken
from accounts.services import api_token_create, api_token_revoke, api_token_use
from gpuquota.core.errors import DomainError, PermissionDenied
from gpuquota.core.models import AuditEntry

pytestmark = pytest.mark.django_db


def api(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def test_a_token_is_shown_once_stored_hashed_and_works(roles):
    token, key = api_token_create(user=roles.lead, name="nightly CI")
    assert key.startswith("gqu_") and token.prefix == key[:10]
    assert key not in (token.key_hash, token.prefix) and len(token.key_hash) == 64
    assert api(key).get("/api/v1/me").json()["username"] == "lead"
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert AuditEntry.objects.filter(action="api_token.create", object_id=str(token.pk)).exists()


def test_an_expired_token_no_longer_works(roles):
    now = timezone.now()
    token, key = api_token_create(user=roles.lead, name="short", now=now - timedelta(days=2),
                                  expires_at=now - timedelta(days=1))
    response = api(key).get("/api/v1/me")
    assert response.status_code == 401 and "expired" in response.json()["detail"]
    assert api_token_use(key=key) is None


def test_a_revoked_token_no_longer_works(roles):
    token, key = api_token_create(user=roles.lead, name="ci")
    api_token_revoke(token=token, actor=roles.lead)
    assert api(key).get("/api/v1/me").status_code == 401
    again = api_token_revoke(token=token, actor=roles.lead)  # idempotent
    assert again.revoked_at == ApiToken.objects.get(pk=token.pk).revoked_at
    assert AuditEntry.objects.filter(action="api_token.revoke").count() == 1


def test_only_the_owner_or_an_admin_revokes(roles):
    token, _key = api_token_create(user=roles.lead, name="ci")
    with pytest.raises(PermissionDenied):
        api_token_revoke(token=token, actor=roles.member)
    assert api_token_revoke(token=token, actor=roles.admin).revoked_at is not None


@pytest.mark.parametrize(("name", "expires_in", "field"), [
    ("", None, "name"), ("   ", None, "name"), ("x" * 121, None, "name"),
    ("ok", timedelta(seconds=-1), "expires_at"),
])
def test_bad_token_requests_are_refused(roles, name, expires_in, field):
    expires_at = timezone.now() + expires_in if expires_in else None
    with pytest.raises(DomainError) as refusal:
        api_token_create(user=roles.lead, name=name, expires_at=expires_at)
    assert refusal.value.field == field
    assert not ApiToken.objects.exists()


def test_the_profile_page_creates_lists_and_revokes(roles):
    client = Client()
    client.force_login(roles.lead)
    response = client.post("/accounts/profile/tokens/",
                           {"name": "laptop script", "expires_on": "2030-01-31"}, follow=True)
    body = response.content.decode()
    token = ApiToken.objects.get(user=roles.lead)
    assert 'id="new-token-key"' in body and token.prefix in body and "laptop script" in body
    assert token.expires_at.date().isoformat() == "2030-02-01"  # the end of 31 January, UTC
    assert 'id="new-token-key"' not in client.get("/accounts/profile/").content.decode()
    client.post(f"/accounts/profile/tokens/{token.pk}/revoke/")
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_the_profile_page_shows_form_errors(roles):
    client = Client()
    client.force_login(roles.lead)
    response = client.post("/accounts/profile/tokens/", {"name": "",
                                                         "expires_on": "2001-01-01"})
    assert response.status_code == 400
    assert "This field is required" in response.content.decode()
    response = client.post("/accounts/profile/tokens/", {"name": "old",
                                                         "expires_on": "2001-01-01"})
    assert "must be in the future" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_nobody_revokes_anothers_token_from_the_profile(roles):
    token, _key = api_token_create(user=roles.lead, name="ci")
    client = Client()
    client.force_login(roles.other_lead)
    assert client.post(f"/accounts/profile/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_admins_revoke_anyones_token_in_the_django_admin(roles):
    token, key = api_token_create(user=roles.lead, name="ci")
    client = Client()
    client.force_login(roles.admin)
    changelist = "/admin/accounts/apitoken/"
    assert "ci" in client.get(changelist).content.decode()
    response = client.post(changelist, {"action": "revoke", "_selected_action": [token.pk]},
                           follow=True)
    assert "Revoked 1 token(s)" in response.content.decode()
    assert api(key).get("/api/v1/me").status_code == 401
    entry = AuditEntry.objects.get(action="api_token.revoke")
    assert entry.actor == roles.admin


def test_the_django_admin_shows_a_token_read_only(roles):
    token, _key = api_token_create(user=roles.lead, name="ci")
    client = Client()
    client.force_login(roles.admin)
    page = client.get(f"/admin/accounts/apitoken/{token.pk}/change/")
    assert page.status_code == 200 and 'name="name"' not in page.content.decode()
    client.post(f"/admin/accounts/apitoken/{token.pk}/change/", {"name": "renamed"})
    assert ApiToken.objects.get(pk=token.pk).name == "ci"


def test_the_expiry_is_typed_as_the_pages_write_dates(roles):
    """Not the browser's date picker, whose format follows its locale (01/31/2030)."""
    client = Client()
    client.force_login(roles.lead)
    page = client.get("/accounts/profile/").content.decode()
    field = page.split('name="expires_on"')[0].rsplit("<input", 1)[1] + page.split(
        'name="expires_on"')[1].split(">", 1)[0]
    assert 'type="text"' in field and 'placeholder="YYYY-MM-DD"' in field
    assert 'type="date"' not in field
    response = client.post("/accounts/profile/tokens/", {"name": "ci",
                                                         "expires_on": "01/31/2030"})
    assert "Enter a date like 2027-01-31." in response.content.decode()
    assert not ApiToken.objects.exists()
