"""LDAP / Active Directory login with django-auth-ldap: a service bind (or anonymous),
the user searched under the user base, bound with their password, groups searched by
type (groupOfNames, posixGroup, AD's member), then the same login service as OIDC.
StartTLS or ldaps:// with a CA file; a server that is down or refuses the service bind is
a clear message, never a "wrong password"."""

import socket
from urllib.parse import urlparse

import ldap
from django.dispatch import receiver
from django_auth_ldap import backend as ldap_backend
from django_auth_ldap.config import (
    ActiveDirectoryGroupType,
    GroupOfNamesType,
    GroupOfUniqueNamesType,
    LDAPSearch,
    NestedActiveDirectoryGroupType,
    NestedGroupOfNamesType,
    PosixGroupType,
)

from accounts.sso import conf
from accounts.sso.conf import LdapDirectory
from accounts.sso.errors import LoginRefused
from accounts.sso.services import ProviderLogin, sso_login

GROUP_TYPES = {"groupOfNames": (GroupOfNamesType, "(objectClass=groupOfNames)"),
               "posixGroup": (PosixGroupType, "(objectClass=posixGroup)"),
               "activeDirectory": (ActiveDirectoryGroupType, "(objectClass=group)"),
               "groupOfUniqueNames": (GroupOfUniqueNamesType, "(objectClass=groupOfUniqueNames)"),
               # groups that are members of groups count too (a search per level)
               "nestedGroupOfNames": (NestedGroupOfNamesType, "(objectClass=groupOfNames)"),
               "nestedActiveDirectory": (NestedActiveDirectoryGroupType, "(objectClass=group)")}
#: Attributes never offered to the rules nor kept: secrets, and binary values.
NOT_CLAIMS = frozenset({"userpassword", "authpassword", "unicodepwd", "sambantpassword",
                        "sambalmpassword", "krbprincipalkey", "userpkcs12", "objectguid",
                        "objectsid", "usercertificate", "jpegphoto", "thumbnailphoto"})
#: Active Directory's userAccountControl bit of a disabled account.
AD_ACCOUNT_DISABLE = 0x2
PROVIDER = "ldap"


def ldap_settings(directory: LdapDirectory) -> dict:
    """django-auth-ldap's settings, from ours."""
    options = {ldap.OPT_NETWORK_TIMEOUT: directory.timeout_s, ldap.OPT_TIMEOUT: directory.timeout_s,
               ldap.OPT_REFERRALS: 0}
    if directory.ca_file:
        options[ldap.OPT_X_TLS_CACERTFILE] = directory.ca_file
        options[ldap.OPT_X_TLS_REQUIRE_CERT] = ldap.OPT_X_TLS_DEMAND
        options[ldap.OPT_X_TLS_NEWCTX] = 0
    return {
        "SERVER_URI": directory.server_uri, "START_TLS": directory.start_tls,
        "CONNECTION_OPTIONS": options, "BIND_DN": directory.bind_dn,
        "BIND_PASSWORD": directory.bind_password,
        "USER_SEARCH": LDAPSearch(directory.user_base, ldap.SCOPE_SUBTREE,
                                  directory.user_filter, ["*", "+"]),
        "USER_ATTRLIST": ["*", "+"],
        "ALWAYS_UPDATE_USER": False, "MIRROR_GROUPS": None, "FIND_GROUP_PERMS": False,
        "CACHE_TIMEOUT": 0,
    }


def _first(attrs: dict, name: str) -> str:
    values = attrs.get(name) or attrs.get(name.lower()) or []
    return str(values[0]) if values else ""


def ldap_groups(ldap_user, directory: LdapDirectory) -> list[tuple[str, str]]:
    """(dn, cn) of every group of the user, of every configured group type."""
    found: dict[str, str] = {}
    for name in directory.group_types:
        kind, object_filter = GROUP_TYPES[name]
        search = LDAPSearch(directory.group_base, ldap.SCOPE_SUBTREE, object_filter)
        for dn, attrs in kind().user_groups(ldap_user, search) or []:
            found[dn.lower()] = _first(attrs, "cn") or dn
    return sorted(found.items())


def ldap_claims(ldap_user, directory: LdapDirectory) -> dict:
    """What the mapping rules read from a directory login: `groups` (names), `group_dns`,
    and the user's text attributes: one value as a name (uid, uidNumber, mail), several as
    a list (memberOf, eduPersonAffiliation)."""
    claims = {}
    for name, values in ldap_user.attrs.items():
        texts = [str(v) for v in values if not isinstance(v, bytes)]
        if name.lower() in NOT_CLAIMS or not texts or len(texts) != len(values):
            continue
        claims[name] = texts[0] if len(texts) == 1 else texts
    groups = ldap_groups(ldap_user, directory)
    claims["groups"] = [cn for _, cn in groups]
    claims["group_dns"] = [dn for dn, _ in groups]
    return claims


class DirectoryBackend(ldap_backend.LDAPBackend):
    """Active only where GPUQUOTA_LDAP_SERVER_URI is set."""

    @property
    def settings(self):
        directory = conf.ldap_directory()
        return ldap_backend.LDAPSettings("GPUQUOTA_LDAP_UNUSED_", ldap_settings(directory)) \
            if directory else None

    @settings.setter
    def settings(self, value):  # django-auth-ldap sets it; ours is read from conf each time
        pass

    def authenticate(self, request, username=None, password=None, **kwargs):
        if conf.ldap_directory() is None or not username or not password:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_user(self, user_id):
        """The session's user, without asking the directory again."""
        user = self.get_user_model().objects.filter(pk=user_id).first()
        return user if user is not None and user.is_active else None

    # Django permissions come from is_staff and the local backend, never from the directory
    # (its groups act through the mapping rules, at login).
    def has_perm(self, user, perm, obj=None) -> bool:
        return False

    def has_module_perms(self, user, app_label) -> bool:
        return False

    def get_all_permissions(self, user, obj=None) -> set:
        return set()

    def get_group_permissions(self, user, obj=None) -> set:
        return set()

    def get_or_build_user(self, username, ldap_user):
        """Called once the directory accepted the password: the login service does the
        rest, all or nothing, keyed by the directory's subject attribute."""
        directory = conf.ldap_directory()
        attrs = ldap_user.attrs
        subject = _subject(attrs, directory.subject_attr) or ldap_user.dn.lower()
        if int(_first(attrs, "userAccountControl") or 0) & AD_ACCOUNT_DISABLE:
            raise LoginRefused("Your directory account is disabled.")
        outcome = sso_login(login=ProviderLogin(
            source="ldap", provider=PROVIDER, issuer=directory.issuer, subject=subject,
            claims=ldap_claims(ldap_user, directory),
            username=_first(attrs, "uid") or _first(attrs, "sAMAccountName") or username,
            email=_first(attrs, "mail"), first_name=_first(attrs, "givenName"),
            last_name=_first(attrs, "sn")))
        return outcome.user, False


def _subject(attrs: dict, name: str) -> str:
    """The subject attribute as text; AD's binary objectGUID as hex, whichever way the
    value came (django-auth-ldap decodes what is valid UTF-8, python-ldap does not)."""
    values = attrs.get(name) or attrs.get(name.lower()) or []
    if not values:
        return ""
    value = values[0]
    if name.lower() == "objectguid":
        return (value if isinstance(value, bytes) else value.encode("utf-8")).hex()
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _tls_failed() -> bool:
    """With TLS in use, the server's port accepts connections: the handshake failed
    (python-ldap says no more than "connect error")."""
    directory = conf.ldap_directory()
    if directory is None or not (directory.start_tls or directory.server_uri.startswith(
            "ldaps://")):
        return False
    parsed = urlparse(directory.server_uri)
    port = parsed.port or (636 if parsed.scheme == "ldaps" else 389)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=directory.timeout_s):
            return True
    except OSError:
        return False


@receiver(ldap_backend.ldap_error)
def _ldap_error_explained(sender, context, user, request, exception, **kwargs):
    """django-auth-ldap's documented hook: an exception raised here leaves authenticate.
    The directory being down is not a wrong password, and must not read as one."""
    if not issubclass(sender, DirectoryBackend):
        return
    if isinstance(exception, ldap.SERVER_DOWN | ldap.CONNECT_ERROR) and _tls_failed():
        raise LoginRefused("The directory answers, but its TLS certificate could not be "
                           "verified: ask an admin to check GPUQUOTA_LDAP_CA_FILE.")
    if isinstance(exception, ldap.SERVER_DOWN | ldap.TIMEOUT | ldap.CONNECT_ERROR):
        raise LoginRefused("The directory (LDAP) does not answer right now; try again later "
                           "(break-glass accounts can still log in).")
    if isinstance(exception, ldap.INVALID_CREDENTIALS):
        raise LoginRefused("The directory refused gpuquota's own bind (its service account): "
                           "ask an admin to check GPUQUOTA_LDAP_BIND_DN and its password.")
    raise LoginRefused(f"The directory answered with an error ({type(exception).__name__}); "
                       "ask an admin.")


def ldap_subjects_active() -> set[str] | None:
    """Subjects of the directory's enabled users (the periodic check), None when no
    directory is configured or it cannot be read now."""
    directory = conf.ldap_directory()
    if directory is None:
        return None
    connection = ldap.initialize(directory.server_uri, bytes_mode=False)
    try:
        for option, value in ldap_settings(directory)["CONNECTION_OPTIONS"].items():
            connection.set_option(option, value)
        if directory.start_tls:
            connection.start_tls_s()
        connection.simple_bind_s(directory.bind_dn, directory.bind_password)
        rows = connection.search_s(directory.user_base, ldap.SCOPE_SUBTREE,
                                   directory.user_filter % {"user": "*"},
                                   [directory.subject_attr,
                                                       "userAccountControl"])
    except ldap.LDAPError:
        return None
    finally:
        connection.unbind_s()
    active = set()
    for dn, attrs in rows:
        control = attrs.get("userAccountControl") or [b"0"]
        if dn is None or int(control[0]) & AD_ACCOUNT_DISABLE:
            continue
        subject = _subject(attrs, directory.subject_attr) or dn.lower()
        active.add(subject)
    return active
