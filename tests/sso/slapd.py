"""A real OpenLDAP server (Debian's slapd) for the tests: its own configuration and
database in a temporary folder, on a loopback port, with users and groups of both kinds
(groupOfNames and posixGroup), and the memberof overlay keeping each user's `memberOf` as
Active Directory does."""

import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import free_port

SLAPD = "/usr/sbin/slapd"
LDAPADD = "/usr/bin/ldapadd"
LDAPMODIFY = "/usr/bin/ldapmodify"
SUFFIX = "dc=example,dc=org"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PASSWORD = "admin-secret"
SERVICE_DN = f"cn=gpuquota,ou=services,{SUFFIX}"
SERVICE_PASSWORD = "service-secret"
USER_BASE = f"ou=people,{SUFFIX}"
GROUP_BASE = f"ou=groups,{SUFFIX}"


def slapd_missing() -> str:
    """Why slapd cannot run here, or ''."""
    for binary in (SLAPD, LDAPADD, LDAPMODIFY):
        if shutil.which(binary) is None:
            return f"needs Debian's slapd and ldap-utils ({binary} missing)"
    return ""


CONFIG = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload memberof
pidfile {folder}/slapd.pid
database mdb
maxsize 10485760
suffix "{suffix}"
rootdn "{root_dn}"
rootpw {root_password}
directory {folder}/data
overlay memberof
access to attrs=userPassword by self =xw by anonymous auth by * none
access to * by users read by * none
"""

BASE_LDIF = f"""\
dn: {SUFFIX}
objectClass: dcObject
objectClass: organization
o: Example
dc: example

dn: ou=people,{SUFFIX}
objectClass: organizationalUnit
ou: people

dn: ou=groups,{SUFFIX}
objectClass: organizationalUnit
ou: groups

dn: ou=services,{SUFFIX}
objectClass: organizationalUnit
ou: services

dn: {SERVICE_DN}
objectClass: organizationalRole
objectClass: simpleSecurityObject
cn: gpuquota
userPassword: {SERVICE_PASSWORD}
"""


def person_ldif(uid: str, *, uid_number: int, password: str, given: str, surname: str) -> str:
    return f"""\
dn: uid={uid},{USER_BASE}
objectClass: inetOrgPerson
objectClass: posixAccount
uid: {uid}
cn: {given} {surname}
givenName: {given}
sn: {surname}
mail: {uid}@example.org
uidNumber: {uid_number}
gidNumber: 5000
homeDirectory: /home/{uid}
userPassword: {password}
"""


def group_of_names_ldif(cn: str, members: list[str], groups: list[str] = ()) -> str:
    """A groupOfNames of users (`members`, uids) and of other groups (`groups`, cns)."""
    lines = [f"dn: cn={cn},{GROUP_BASE}", "objectClass: groupOfNames", f"cn: {cn}"]
    lines += [f"member: uid={uid},{USER_BASE}" for uid in members]
    lines += [f"member: cn={group},{GROUP_BASE}" for group in groups]
    return "\n".join(lines) + "\n"


def posix_group_ldif(cn: str, gid: int, member_uids: list[str]) -> str:
    lines = [f"dn: cn={cn},{GROUP_BASE}", "objectClass: posixGroup", f"cn: {cn}",
             f"gidNumber: {gid}"]
    lines += [f"memberUid: {uid}" for uid in member_uids]
    return "\n".join(lines) + "\n"


class Slapd:
    def __init__(self, folder: Path, *, tls: dict[str, Path] | None = None):
        self.folder = folder
        self.port = free_port()
        self.uri = f"ldap://127.0.0.1:{self.port}"
        self.tls = tls
        self.ldaps_uri = f"ldaps://127.0.0.1:{free_port()}" if tls else ""
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        (self.folder / "data").mkdir(exist_ok=True)
        config = self.folder / "slapd.conf"
        text = CONFIG.format(folder=self.folder, suffix=SUFFIX, root_dn=ROOT_DN,
                             root_password=ROOT_PASSWORD)
        if self.tls:
            text = (f"TLSCACertificateFile {self.tls['ca']}\n"
                    f"TLSCertificateFile {self.tls['cert']}\n"
                    f"TLSCertificateKeyFile {self.tls['key']}\n") + text
        config.write_text(text)
        urls = f"{self.uri}/ {self.ldaps_uri}/" if self.tls else f"{self.uri}/"
        self.process = subprocess.Popen(
            [SLAPD, "-f", str(config), "-h", urls, "-d", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            probe = subprocess.run(["ldapsearch", "-x", "-H", self.uri, "-b", "", "-s", "base"],
                                   capture_output=True, timeout=10)
            if probe.returncode in (0, 32):
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"slapd exited: {self.process.stderr.read().decode()}")
            time.sleep(0.1)
        raise RuntimeError("slapd did not answer within 20 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def _run(self, binary: str, ldif: str) -> None:
        subprocess.run([binary, "-x", "-H", self.uri, "-D", ROOT_DN, "-w", ROOT_PASSWORD],
                       input=ldif.encode(), check=True, capture_output=True, timeout=20)

    def add(self, ldif: str) -> None:
        self._run(LDAPADD, ldif)

    def modify(self, ldif: str) -> None:
        self._run(LDAPMODIFY, ldif)


@contextmanager
def running_slapd(folder: Path, *, tls: dict[str, Path] | None = None):
    server = Slapd(folder, tls=tls)
    server.start()
    try:
        server.add(BASE_LDIF)
        yield server
    finally:
        server.stop()


def tls_files(folder: Path) -> dict[str, Path]:
    """A CA and a certificate for 127.0.0.1 signed by it, and another CA (that signed
    nothing here), as PEM files in `folder`."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def key():
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def certificate(subject_key, subject, issuer_key, issuer, *, ca: bool):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                   .public_key(subject_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    def name(text):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    ca_key, other_key, server_key = key(), key(), key()
    ca = certificate(ca_key, name("test CA"), ca_key, name("test CA"), ca=True)
    other = certificate(other_key, name("other CA"), other_key, name("other CA"), ca=True)
    server = certificate(server_key, name("127.0.0.1"), ca_key, name("test CA"), ca=False)
    files = {"ca": folder / "ca.pem", "other_ca": folder / "other-ca.pem",
             "cert": folder / "server.pem", "key": folder / "server-key.pem"}
    pem = serialization.Encoding.PEM
    files["ca"].write_bytes(ca.public_bytes(pem))
    files["other_ca"].write_bytes(other.public_bytes(pem))
    files["cert"].write_bytes(server.public_bytes(pem))
    files["key"].write_bytes(server_key.private_bytes(
        pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))
    return files
