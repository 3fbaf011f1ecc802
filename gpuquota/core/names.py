"""The one validator for every name that reaches another system (docs/security.md, "Names").

A name that reaches Slurm (account, user, QOS, reservation), a unix host (a user name from
an identity provider's claim) or Kubernetes (a namespace, an object name, a label value) is
checked here where it enters: admin forms, the API, the SSO mapping rules and the claims an
identity provider sends. Each check answers with the reason, in words a person can act on,
so the form or the API's error names the field and why.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

#: Slurm accounts, QOS and reservations: Slurm lower-cases account and QOS names, so a name
#: we write must read back as itself. Letters, digits, `_`, `.` and `-`; no leading `-`.
_SLURM_NAME = re.compile(r"^[a-z0-9_][a-z0-9_.-]*$")
#: Unix user names as sites have them (POSIX portable set; `first.last` from a directory).
_UNIX_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
SLURM_NAME_MAX = 64
UNIX_USER_MAX = 32
#: Names no site object of ours may take: `root` (Slurm's root account and user) and the
#: prefix of every object gpuquota creates itself (`gq-lending`, `gq-owner`, `gq-res-7`).
RESERVED = frozenset({"root"})
OWN_PREFIX = "gq-"

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _shape_error(value: object, *, pattern: re.Pattern, max_length: int, what: str,
                 allowed: str) -> str | None:
    if not isinstance(value, str) or not value:
        return f"{what} is empty."
    if len(value) > max_length:
        return f"{what} is {len(value)} characters long; at most {max_length}."
    if value.startswith("-"):
        return f"{what} may not start with '-' (a command would read it as an option)."
    if not pattern.match(value):
        bad = sorted({c for c in value if not re.match(r"[A-Za-z0-9_.-]", c)})
        shown = " ".join(repr(c) for c in bad) if bad else "its letters' case"
        return f"{what} may hold only {allowed}; it has {shown}."
    return None


def slurm_name_error(value: object, *, what: str = "A Slurm name",
                     own: bool = False) -> str | None:
    """Why `value` cannot be a Slurm account, QOS or reservation name, or None if it can.
    `own=True` for the names gpuquota makes itself, which carry the `gq-` prefix."""
    found = _shape_error(value, pattern=_SLURM_NAME, max_length=SLURM_NAME_MAX, what=what,
                         allowed="lower-case letters, digits, '_', '.' and '-'")
    if found:
        return found
    if value in RESERVED:
        return f"{what} may not be {value!r}: Slurm keeps it for itself."
    if not own and value.startswith(OWN_PREFIX):
        return f"{what} may not start with {OWN_PREFIX!r}: gpuquota names its own objects so."
    return None


def unix_user_error(value: object, *, what: str = "A unix user name") -> str | None:
    """Why `value` cannot be a unix (and Slurm) user name, or None if it can."""
    found = _shape_error(value, pattern=_UNIX_USER, max_length=UNIX_USER_MAX, what=what,
                         allowed="letters, digits, '_', '.' and '-'")
    if found:
        return found
    if value in RESERVED:
        return f"{what} may not be {value!r}."
    if value.startswith(OWN_PREFIX):
        return f"{what} may not start with {OWN_PREFIX!r}: gpuquota names its own objects so."
    return None


def dns1123_label_error(value: object, *, what: str = "A Kubernetes name") -> str | None:
    """Why `value` cannot be a DNS-1123 label (a namespace, most object names), or None."""
    if not isinstance(value, str) or not value:
        return f"{what} is empty."
    if len(value) > 63:
        return f"{what} is {len(value)} characters long; at most 63."
    if not _DNS1123_LABEL.match(value):
        return (f"{what} may hold only lower-case letters, digits and '-', and must start and "
                "end with a letter or digit.")
    return None


def label_value_error(value: object, *, what: str = "A Kubernetes label value") -> str | None:
    """Why `value` cannot be a Kubernetes label value, or None."""
    if not isinstance(value, str):
        return f"{what} is not text."
    if len(value) > 63:
        return f"{what} is {len(value)} characters long; at most 63."
    if not _LABEL_VALUE.match(value):
        return (f"{what} may hold only letters, digits, '-', '_' and '.', and must start and "
                "end with a letter or digit.")
    return None


def _raise(error: str | None) -> None:
    if error:
        raise ValidationError(error, code="invalid")


def slurm_name_validate(value: str) -> None:
    """A Django validator: `value` is a Slurm account, QOS or reservation name."""
    _raise(slurm_name_error(value))


def unix_user_validate(value: str) -> None:
    """A Django validator: `value` is a unix user name."""
    _raise(unix_user_error(value))


def dns1123_label_validate(value: str) -> None:
    """A Django validator: `value` is a DNS-1123 label."""
    _raise(dns1123_label_error(value))


#: A team's slug names its Kubernetes queues (`gq-<slug>`, a DNS-1123 label and the value
#: of the label `kueue.x-k8s.io/queue-name`) and is itself a label value: a DNS-1123 label
#: short enough to stay one with the prefix.
TEAM_SLUG_MAX = 63 - len(OWN_PREFIX)


def team_slug_error(value: object, *, what: str = "A team slug") -> str | None:
    """Why `value` cannot be a team's slug (it names the team's Kubernetes queues and
    labels), or None."""
    found = dns1123_label_error(value, what=what)
    if found:
        return found
    if len(value) > TEAM_SLUG_MAX:
        return (f"{what} is {len(value)} characters long; at most {TEAM_SLUG_MAX}, so that "
                f"{OWN_PREFIX}<slug> stays a Kubernetes name.")
    return None


def team_slug_validate(value: str) -> None:
    """A Django validator: `value` can be a team's slug."""
    _raise(team_slug_error(value))
