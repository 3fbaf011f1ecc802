"""A real OpenLDAP server (Debian's slapd) for the tests: its own configuration and
database in a temporary folder, on a loopback port, with users and groups of both kinds
(groupOfNames and posixGroup)."""

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
pidfile {folder}/slapd.pid
database mdb
maxsize 10485760
suffix "{suffix}"
rootdn "{root_dn}"
rootpw {root_password}
directory {folder}/data
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


def group_of_names_ldif(cn: str, members: list[str]) -> str:
    lines = [f"dn: cn={cn},{GROUP_BASE}", "objectClass: groupOfNames", f"cn: {cn}"]
    lines += [f"member: uid={uid},{USER_BASE}" for uid in members]
    return "\n".join(lines) + "\n"


def posix_group_ldif(cn: str, gid: int, member_uids: list[str]) -> str:
    lines = [f"dn: cn={cn},{GROUP_BASE}", "objectClass: posixGroup", f"cn: {cn}",
             f"gidNumber: {gid}"]
    lines += [f"memberUid: {uid}" for uid in member_uids]
    return "\n".join(lines) + "\n"


class Slapd:
    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.uri = f"ldap://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        (self.folder / "data").mkdir(exist_ok=True)
        config = self.folder / "slapd.conf"
        config.write_text(CONFIG.format(folder=self.folder, suffix=SUFFIX, root_dn=ROOT_DN,
                                        root_password=ROOT_PASSWORD))
        self.process = subprocess.Popen(
            [SLAPD, "-f", str(config), "-h", f"{self.uri}/", "-d", "0"],
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
def running_slapd(folder: Path):
    server = Slapd(folder)
    server.start()
    try:
        server.add(BASE_LDIF)
        yield server
    finally:
        server.stop()
