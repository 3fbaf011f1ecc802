import pytest

from tests.sso.slapd import (
    GROUP_BASE,
    SERVICE_DN,
    SERVICE_PASSWORD,
    USER_BASE,
    group_of_names_ldif,
    person_ldif,
    posix_group_ldif,
    running_slapd,
    tls_files,
)


@pytest.fixture
def slapd(tmp_path, settings):
    """A real slapd on loopback with alice and bob (password `pw-<name>`), the
    groupOfNames `vision-leads` (alice) and `vision-staff` (bob), the posixGroup
    `nlp` (bob); gpuquota's directory settings point at it."""
    yield from _slapd(tmp_path, settings, tls=None)


@pytest.fixture
def slapd_tls(tmp_path, settings):
    """The same, also speaking TLS (StartTLS, and ldaps:// at `.ldaps_uri`) with a
    certificate for 127.0.0.1 of a CA of the test's (`.tls["ca"]`; `.tls["other_ca"]`
    signed nothing)."""
    yield from _slapd(tmp_path, settings, tls=tls_files(tmp_path))


def _slapd(tmp_path, settings, *, tls):
    with running_slapd(tmp_path, tls=tls) as server:
        server.add(person_ldif("alice", uid_number=10001, password="pw-alice", given="Alice",
                               surname="Archer"))
        server.add(person_ldif("bob", uid_number=10002, password="pw-bob", given="Bob",
                               surname="Baker"))
        server.add(group_of_names_ldif("vision-leads", ["alice"]))
        server.add(group_of_names_ldif("vision-staff", ["bob"]))
        server.add(posix_group_ldif("nlp", 6001, ["bob"]))
        settings.GPUQUOTA_LDAP_SERVER_URI = server.uri
        settings.GPUQUOTA_LDAP_BIND_DN = SERVICE_DN
        settings.GPUQUOTA_LDAP_BIND_PASSWORD = SERVICE_PASSWORD
        settings.GPUQUOTA_LDAP_USER_BASE = USER_BASE
        settings.GPUQUOTA_LDAP_GROUP_BASE = GROUP_BASE
        settings.GPUQUOTA_LDAP_GROUP_TYPES = "groupOfNames,posixGroup"
        settings.GPUQUOTA_LDAP_TIMEOUT_S = "3"
        yield server


@pytest.fixture
def oidc_provider(settings):
    """oidc-provider-mock, in this process, on a loopback port, configured as the provider
    `mock` ("Mock SSO"). `.set_user(sub, **claims)` chooses a subject's claims (any JSON:
    objects and lists of objects too); `.configure(name=..., groups_claim=...)` changes
    gpuquota's settings of it; `.login(sub)` logs in through it without a browser and
    answers (the Django test client, the callback's response)."""
    import dataclasses

    import requests
    from oidc_provider_mock import run_server_in_thread

    from accounts.sso.conf import OidcProvider
    from tests.helpers import free_port

    port = free_port()
    with run_server_in_thread(port=port, require_nonce=True) as server:
        issuer = f"http://localhost:{server.server_port}"

        class Handle:
            url = issuer
            provider = OidcProvider(name="mock", label="Mock SSO", issuer=issuer,
                                    client_id="gpuquota", client_secret="mock-secret")

            @staticmethod
            def set_user(sub: str, **claims) -> None:
                response = requests.put(f"{issuer}/users/{sub}", json=claims, timeout=10)
                response.raise_for_status()

            @classmethod
            def configure(cls, **changes) -> None:
                cls.provider = dataclasses.replace(cls.provider, **changes)
                settings.GPUQUOTA_OIDC_PROVIDERS = [cls.provider]

            @classmethod
            def login(cls, sub: str):
                from urllib.parse import urlparse

                from django.test import Client

                client = Client()
                authorize = client.get(f"/accounts/oidc/{cls.provider.name}/login/")
                assert authorize.status_code == 302, authorize
                answer = requests.post(authorize["Location"], data={"sub": sub},
                                       allow_redirects=False, timeout=10)
                callback = urlparse(answer.headers["Location"])
                return client, client.get(f"{callback.path}?{callback.query}")

        settings.GPUQUOTA_OIDC_PROVIDERS = [Handle.provider]
        yield Handle
