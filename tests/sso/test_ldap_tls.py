"""The directory over TLS, against a real slapd with a certificate of the test's CA:
StartTLS and ldaps:// log in when the CA file trusts it; a certificate that the CA file
does not vouch for is refused with its own message, and nothing is created."""

import html

import pytest
from django.test import Client

from accounts.models import User
from tests.sso.slapd import slapd_missing

pytestmark = [pytest.mark.sso, pytest.mark.django_db,
              pytest.mark.skipif(bool(slapd_missing()), reason=slapd_missing() or "-")]


def _login():
    response = Client().post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    return response.status_code, html.unescape(response.content.decode())


def test_starttls_with_the_ca_file(slapd_tls, settings):
    settings.GPUQUOTA_LDAP_START_TLS = "1"
    settings.GPUQUOTA_LDAP_CA_FILE = str(slapd_tls.tls["ca"])
    assert _login()[0] == 302
    assert User.objects.filter(username="alice").exists()


def test_ldaps_with_the_ca_file(slapd_tls, settings):
    settings.GPUQUOTA_LDAP_SERVER_URI = slapd_tls.ldaps_uri
    settings.GPUQUOTA_LDAP_CA_FILE = str(slapd_tls.tls["ca"])
    assert _login()[0] == 302


@pytest.mark.parametrize("how", ["starttls", "ldaps"])
def test_a_certificate_the_ca_file_does_not_vouch_for_is_refused(slapd_tls, settings, how):
    if how == "ldaps":
        settings.GPUQUOTA_LDAP_SERVER_URI = slapd_tls.ldaps_uri
    else:
        settings.GPUQUOTA_LDAP_START_TLS = "1"
    settings.GPUQUOTA_LDAP_CA_FILE = str(slapd_tls.tls["other_ca"])
    status, page = _login()
    assert status == 200 and "certificate" in page
    assert not User.objects.exists()
