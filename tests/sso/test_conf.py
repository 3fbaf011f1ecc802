"""Single sign-on's settings from the environment: providers in order, and a provider or
directory switched on but not configured reported at start by `manage.py check`."""

import pytest

from accounts.sso import conf
from accounts.sso.checks import sso_settings_check

pytestmark = [pytest.mark.sso]


def test_providers_come_from_the_environment_in_order(monkeypatch):
    monkeypatch.setenv("GPUQUOTA_OIDC_PROVIDERS", "kc, entra")
    for name, issuer in (("KC", "https://sso.example.org/realms/x/"),
                         ("ENTRA", "https://login.microsoftonline.com/t/v2.0")):
        monkeypatch.setenv(f"GPUQUOTA_OIDC_{name}_ISSUER", issuer)
        monkeypatch.setenv(f"GPUQUOTA_OIDC_{name}_CLIENT_ID", "gq")
        monkeypatch.setenv(f"GPUQUOTA_OIDC_{name}_CLIENT_SECRET", "s")
    monkeypatch.setenv("GPUQUOTA_OIDC_ENTRA_LABEL", "Microsoft")
    providers = conf.oidc_providers()
    assert [(p.name, p.label, p.issuer) for p in providers] == [
        ("kc", "Kc", "https://sso.example.org/realms/x"),
        ("entra", "Microsoft", "https://login.microsoftonline.com/t/v2.0")]
    assert sso_settings_check() == []


@pytest.mark.parametrize("env, says", [
    ({"GPUQUOTA_OIDC_PROVIDERS": "kc"}, "GPUQUOTA_OIDC_KC_ISSUER is not set"),
    ({"GPUQUOTA_OIDC_PROVIDERS": "Bad Name"}, "is not a name"),
    ({"GPUQUOTA_LDAP_SERVER_URI": "ldap://dc1"}, "GPUQUOTA_LDAP_USER_BASE is not"),
    ({"GPUQUOTA_LDAP_SERVER_URI": "http://dc1"}, "must be ldap:// or ldaps://"),
    ({"GPUQUOTA_LDAP_SERVER_URI": "ldap://dc1", "GPUQUOTA_LDAP_USER_BASE": "dc=x",
      "GPUQUOTA_LDAP_GROUP_TYPES": "nisNetgroup"}, "unknown ['nisNetgroup']"),
    ({"GPUQUOTA_SSO_TOKEN_REAUTH_DAYS": "a month"}, "invalid literal"),
])
def test_a_half_configured_integration_fails_the_start_checks(monkeypatch, env, says):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    errors = sso_settings_check()
    assert errors and says in errors[0].msg


def test_an_entra_id_provider_asks_microsoft_graph_at_an_overage_unless_told(monkeypatch):
    monkeypatch.setenv("GPUQUOTA_OIDC_PROVIDERS", "entra,gov,kc,own")
    for name, issuer in (("ENTRA", "https://login.microsoftonline.com/t/v2.0"),
                         ("GOV", "https://login.microsoftonline.us/t/v2.0"),
                         ("KC", "https://sso.example.org/realms/x"),
                         ("OWN", "https://login.microsoftonline.com/t/v2.0")):
        monkeypatch.setenv(f"GPUQUOTA_OIDC_{name}_ISSUER", issuer)
        monkeypatch.setenv(f"GPUQUOTA_OIDC_{name}_CLIENT_ID", "gq")
        monkeypatch.setenv(f"GPUQUOTA_OIDC_{name}_CLIENT_SECRET", "s")
    monkeypatch.setenv("GPUQUOTA_OIDC_OWN_GRAPH_URL", "off")
    assert [p.graph_url for p in conf.oidc_providers()] == [
        "https://graph.microsoft.com/v1.0", "https://graph.microsoft.us/v1.0", "", ""]
    monkeypatch.setenv("GPUQUOTA_OIDC_KC_GRAPH_URL", "graph.example.org")
    errors = sso_settings_check()
    assert errors and "GRAPH_URL must be an http(s) URL" in errors[0].msg
