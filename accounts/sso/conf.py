"""Settings of single sign-on, from the environment, read at call time so tests can
override them with Django settings of the same name (docs/sso.md, docs/configuration.md)."""

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from gpuquota.core.env import modules_installed

PROVIDER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


@dataclass(frozen=True)
class OidcProvider:
    """One OpenID Connect provider: discovery from `issuer`, the client gpuquota is
    registered as, and which claims it reads."""

    name: str
    label: str
    issuer: str
    client_id: str
    client_secret: str
    scopes: str = "openid email profile"
    groups_claim: str = "groups"
    #: A provider that cuts the groups claim at a number without saying so (Okta: 100): a
    #: claim with this many is taken as cut, never as all the user's groups; 0: none.
    groups_max: int = 0
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    #: Microsoft Graph's base URL, asked for the user's groups when the ID token carries
    #: Entra ID's group overage instead of them (accounts.sso.graph); empty: never asked.
    graph_url: str = ""


def _setting(name: str, default: str = "") -> str:
    value = getattr(settings, name, None)
    return str(value) if value is not None else os.environ.get(name, default)


def _env_provider(name: str) -> OidcProvider:
    prefix = f"GPUQUOTA_OIDC_{name.upper().replace('-', '_')}_"

    def value(key: str, default: str | None = None) -> str:
        found = os.environ.get(prefix + key, default)
        if found is None or found == "":
            raise ImproperlyConfigured(f"OIDC provider {name!r} is listed in "
                                       f"GPUQUOTA_OIDC_PROVIDERS but {prefix}{key} is not set")
        return found

    return OidcProvider(
        name=name, label=value("LABEL", name.capitalize()),
        issuer=value("ISSUER").rstrip("/"), client_id=value("CLIENT_ID"),
        client_secret=value("CLIENT_SECRET"),
        scopes=value("SCOPES", "openid email profile"),
        groups_claim=value("GROUPS_CLAIM", "groups"),
        groups_max=int(value("GROUPS_MAX", "0")),
        graph_url=_graph_url(os.environ.get(prefix + "GRAPH_URL", ""), issuer=value("ISSUER")))


#: Entra ID's issuers (global, US government, China); their providers ask Microsoft Graph
#: at an overage unless GPUQUOTA_OIDC_<NAME>_GRAPH_URL says otherwise.
ENTRA_ISSUER_HOSTS = {"login.microsoftonline.com": "https://graph.microsoft.com/v1.0",
                      "login.microsoftonline.us": "https://graph.microsoft.us/v1.0",
                      "login.partner.microsoftonline.cn":
                          "https://microsoftgraph.chinacloudapi.cn/v1.0"}


def _graph_url(configured: str, *, issuer: str) -> str:
    """The Graph base URL a provider asks at an overage: the configured one (`off`: none),
    else Microsoft's own for an Entra ID issuer, else none."""
    configured = configured.strip().rstrip("/")
    if configured.lower() in ("off", "none", "0"):
        return ""
    if configured:
        if not configured.startswith(("https://", "http://")):
            raise ImproperlyConfigured(f"GRAPH_URL must be an http(s) URL: {configured!r}")
        return configured
    return ENTRA_ISSUER_HOSTS.get(urlsplit(issuer).hostname or "", "")


def oidc_providers() -> list[OidcProvider]:
    """The configured providers, in the order of `GPUQUOTA_OIDC_PROVIDERS` (names)."""
    configured = getattr(settings, "GPUQUOTA_OIDC_PROVIDERS", None)
    if configured is not None:  # tests and settings files: a list of OidcProvider or dicts
        return [p if isinstance(p, OidcProvider) else OidcProvider(**p) for p in configured]
    names = [n.strip() for n in os.environ.get("GPUQUOTA_OIDC_PROVIDERS", "").split(",")
             if n.strip()]
    for name in names:
        if not PROVIDER_NAME.match(name):
            raise ImproperlyConfigured(f"GPUQUOTA_OIDC_PROVIDERS: {name!r} is not a name of "
                                       "lower-case letters, digits and dashes")
    return [_env_provider(name) for name in names]


def oidc_provider(name: str) -> OidcProvider | None:
    return next((p for p in oidc_providers() if p.name == name), None)


def oidc_timeout_s() -> int:
    """How long one request to a provider may take (`GPUQUOTA_OIDC_TIMEOUT_S`, 10)."""
    return int(_setting("GPUQUOTA_OIDC_TIMEOUT_S", "10"))


def oidc_leeway_s() -> int:
    """Clock skew allowed on exp/nbf/iat (`GPUQUOTA_OIDC_LEEWAY_S`, 60)."""
    return int(_setting("GPUQUOTA_OIDC_LEEWAY_S", "60"))


def session_follows_id_token() -> bool:
    """A session ends no later than the ID token it began with
    (`GPUQUOTA_SSO_SESSION_FOLLOWS_TOKEN`, default on)."""
    return _setting("GPUQUOTA_SSO_SESSION_FOLLOWS_TOKEN", "1").lower() in ("1", "true", "yes",
                                                                            "on")


def break_glass_users() -> set[str]:
    """User names that may log in with a local password (`GPUQUOTA_LOCAL_LOGIN_USERS`,
    comma-separated); empty: every local account may."""
    return {n.strip() for n in _setting("GPUQUOTA_LOCAL_LOGIN_USERS").split(",") if n.strip()}


def cluster_user_claim() -> str:
    """The claim (or LDAP attribute) giving the user's unix user name on the clusters
    (`GPUQUOTA_SSO_CLUSTER_USER_CLAIM`, e.g. preferred_username, uid); empty: none."""
    return _setting("GPUQUOTA_SSO_CLUSTER_USER_CLAIM")


def cluster_uid_claim() -> str:
    """The claim (or LDAP attribute) giving the unix uid (`GPUQUOTA_SSO_CLUSTER_UID_CLAIM`,
    e.g. uidNumber); empty: none."""
    return _setting("GPUQUOTA_SSO_CLUSTER_UID_CLAIM")


def token_reauth_days() -> int:
    """API tokens of an OIDC user stop working when they have not logged in through the
    provider for this many days (`GPUQUOTA_SSO_TOKEN_REAUTH_DAYS`, 30; 0: never)."""
    return int(_setting("GPUQUOTA_SSO_TOKEN_REAUTH_DAYS", "30"))


def claim_shapes_days() -> int:
    """How long the claim paths and shapes seen at logins are kept for the rules' save
    check (`GPUQUOTA_SSO_CLAIM_SHAPES_DAYS`, 30)."""
    return int(_setting("GPUQUOTA_SSO_CLAIM_SHAPES_DAYS", "30"))


@dataclass(frozen=True)
class LdapDirectory:
    server_uri: str
    start_tls: bool
    ca_file: str
    bind_dn: str
    bind_password: str
    user_base: str
    user_filter: str
    group_base: str
    group_types: tuple[str, ...]
    subject_attr: str
    timeout_s: int

    @property
    def issuer(self) -> str:
        return f"{self.server_uri.rstrip('/')}/{self.user_base}"


GROUP_TYPES = ("groupOfNames", "posixGroup", "activeDirectory", "groupOfUniqueNames",
               "nestedGroupOfNames", "nestedActiveDirectory")


def ldap_directory() -> LdapDirectory | None:
    """The LDAP/AD directory (`GPUQUOTA_LDAP_SERVER_URI` set), or None."""
    uri = _setting("GPUQUOTA_LDAP_SERVER_URI")
    if not uri:
        return None
    if not modules_installed("ldap", "django_auth_ldap"):
        raise ImproperlyConfigured(
            "GPUQUOTA_LDAP_SERVER_URI is set but the LDAP extra is not installed: "
            "pip install -r requirements-ldap.txt (python-ldap builds from source and needs "
            "gcc and the OpenLDAP and Cyrus SASL headers, e.g. Debian's libldap-dev and "
            "libsasl2-dev; with Docker, build with LDAP=1; docs/sso.md)")
    if not uri.startswith(("ldap://", "ldaps://")):
        raise ImproperlyConfigured(f"GPUQUOTA_LDAP_SERVER_URI must be ldap:// or ldaps://: "
                                   f"{uri!r}")
    user_base = _setting("GPUQUOTA_LDAP_USER_BASE")
    if not user_base:
        raise ImproperlyConfigured("GPUQUOTA_LDAP_SERVER_URI is set but "
                                   "GPUQUOTA_LDAP_USER_BASE is not")
    types = tuple(t.strip() for t in _setting("GPUQUOTA_LDAP_GROUP_TYPES", "groupOfNames")
                  .split(",") if t.strip())
    unknown = [t for t in types if t not in GROUP_TYPES]
    if unknown:
        raise ImproperlyConfigured(f"GPUQUOTA_LDAP_GROUP_TYPES: unknown {unknown}; "
                                   f"known: {', '.join(GROUP_TYPES)}")
    return LdapDirectory(
        server_uri=uri,
        start_tls=_setting("GPUQUOTA_LDAP_START_TLS", "0").lower() in ("1", "true", "yes", "on"),
        ca_file=_setting("GPUQUOTA_LDAP_CA_FILE"),
        bind_dn=_setting("GPUQUOTA_LDAP_BIND_DN"),
        bind_password=_setting("GPUQUOTA_LDAP_BIND_PASSWORD"),
        user_base=user_base,
        user_filter=_setting("GPUQUOTA_LDAP_USER_FILTER", "(uid=%(user)s)"),
        group_base=_setting("GPUQUOTA_LDAP_GROUP_BASE") or user_base,
        group_types=types,
        subject_attr=_setting("GPUQUOTA_LDAP_SUBJECT_ATTR", "entryUUID"),
        timeout_s=int(_setting("GPUQUOTA_LDAP_TIMEOUT_S", "5")),
    )
