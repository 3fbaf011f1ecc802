"""The admin's pages of single sign-on: rules saved through the service (audited, refused
on the field at fault), identities read-only, memberships showing their source; the
directory backend lends no Django permissions (a non-admin is sent away, not a 500)."""

import pytest
from django.test import Client

from accounts.models import MappingRule
from gpuquota.core.models import AuditEntry
from tests.factories import AdminFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.sso, pytest.mark.django_db]


def test_admin_pages_of_rules_identities_and_memberships():
    outsider = Client()
    outsider.force_login(UserFactory())
    assert outsider.get("/admin/").status_code == 302
    admin = Client()
    admin.force_login(AdminFactory())
    assert admin.get("/admin/").status_code == 200
    assert admin.get("/admin/accounts/externalidentity/").status_code == 200
    assert "source" in admin.get("/admin/accounts/membership/").content.decode()

    refused = admin.post("/admin/accounts/mappingrule/add/", {
        "position": 1, "claim": "groups", "match": "regex", "value": "(bad", "grant": "admin",
        "is_active": "on"})
    assert refused.status_code == 200 and "Not a regular expression" in refused.content.decode()
    team = TeamFactory()
    saved = admin.post("/admin/accounts/mappingrule/add/", {
        "position": 1, "claim": "groups", "match": "equals", "value": "vision", "grant": "lead",
        "team": team.pk, "is_active": "on"})
    assert saved.status_code == 302
    rule = MappingRule.objects.get()
    assert AuditEntry.objects.filter(action="sso_rule.create", object_id=str(rule.pk)).exists()
