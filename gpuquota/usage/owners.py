"""Owner team of a process in a window (accounting.md, Identity), resolved in bulk.

The rule is the one of `accounts.selectors.identity_resolve` and `billing_team`
(an interval is in force at `at` when valid_from <= at < valid_until): the team
mapped from the Slurm account or Kubernetes namespace; else the billing team of
the user mapped from the unix user name (or uid), on that date; else None
(unattributed). A rollup resolves thousands of process windows, so the mappings
in force around its window are loaded once (two queries) instead of per window, and
each answer is remembered until the next instant at which a loaded mapping starts or
ends (between two such instants no mapping's validity changes, so neither does it).
"""

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.db.models import Q

from accounts.models import ClusterIdentity, Membership

Kind = ClusterIdentity.Kind
_TEAM_KIND_BY_SOURCE = {"slurm": Kind.SLURM_ACCOUNT, "kubernetes": Kind.K8S_NAMESPACE}


def _overlapping(start: datetime, end: datetime) -> Q:
    return Q(valid_from__lt=end) & (Q(valid_until__isnull=True) | Q(valid_until__gt=start))


def _s(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def _in_force(rows: list[tuple], at: int):
    for valid_from, valid_until, value in rows:
        if valid_from <= at and (valid_until is None or at < valid_until):
            return value
    return None


def _named_by(processes: Iterable) -> Q | None:
    """The mappings these processes (job_source, job_account, user, uid) can resolve
    through, or None when they name none."""
    keys: dict[str, set[str]] = defaultdict(set)
    for process in processes:
        team_kind = _TEAM_KIND_BY_SOURCE.get(process.job_source or "")
        if team_kind is not None and process.job_account:
            keys[team_kind].add(process.job_account)
        if process.user:
            keys[Kind.UNIX_USER].add(process.user)
        if process.uid is not None:
            keys[Kind.UNIX_UID].add(str(process.uid))
    named = None
    for kind, values in keys.items():
        q = Q(kind=kind, key__in=sorted(values))
        named = q if named is None else named | q
    return named


class OwnerResolver:
    """Resolves (cluster, process) → owner team id over [start, end).

    `processes` (objects with job_source, job_account, user and uid), when given, are the
    only ones it will be asked about: it loads the mappings they name, not every account
    of the clusters (2,000 teams' at 100,000 GPUs), the same answers for them."""

    def __init__(self, *, cluster_ids: set[int], start: datetime, end: datetime,
                 processes: Iterable | None = None):
        self._identities: dict[tuple, list[tuple]] = defaultdict(list)
        user_ids: set[int] = set()
        rows = ClusterIdentity.objects.filter(_overlapping(start, end), cluster_id__in=cluster_ids)
        if processes is not None:
            named = _named_by(processes)
            rows = rows.filter(named) if named is not None else rows.none()
        for row in rows.values("cluster_id", "kind", "key", "user_id", "team_id",
                               "valid_from", "valid_until"):
            target = row["team_id"] if row["team_id"] is not None else row["user_id"]
            key = (row["cluster_id"], row["kind"], row["key"])
            self._identities[key].append((_s(row["valid_from"]), _s(row["valid_until"]),
                                          target))
            if row["user_id"] is not None:
                user_ids.add(row["user_id"])
        self._billing: dict[int, list[tuple]] = defaultdict(list)
        memberships = Membership.objects.filter(
            _overlapping(start, end), user_id__in=user_ids, is_billing=True
        )
        for row in memberships.values("user_id", "team_id", "valid_from", "valid_until"):
            self._billing[row["user_id"]].append(
                (_s(row["valid_from"]), _s(row["valid_until"]), row["team_id"])
            )
        self._changes = sorted({instant for rows in (*self._identities.values(),
                                                     *self._billing.values())
                                for valid_from, valid_until, _ in rows
                                for instant in (valid_from, valid_until) if instant is not None})
        self._known: dict[tuple, int | None] = {}

    def _identity(self, cluster_id: int, kind: str, key: str | None, at: int):
        if key is None or key == "":
            return None
        return _in_force(self._identities.get((cluster_id, kind, key), []), at)

    def team_id(self, *, cluster_id: int, job_source: str | None, job_account: str | None,
                user: str | None, uid: int | None, at_s: int) -> int | None:
        """The owner team id of one process window at `at_s` (epoch seconds), or None
        (unattributed)."""
        known = (cluster_id, job_source, job_account, user, uid,
                 bisect_right(self._changes, at_s))
        if known not in self._known:
            self._known[known] = self._resolve(cluster_id, job_source, job_account, user, uid,
                                               at_s)
        return self._known[known]

    def _resolve(self, cluster_id: int, job_source: str | None, job_account: str | None,
                 user: str | None, uid: int | None, at: int) -> int | None:
        team_kind = _TEAM_KIND_BY_SOURCE.get(job_source or "")
        if team_kind is not None:
            team_id = self._identity(cluster_id, team_kind, job_account, at)
            if team_id is not None:
                return team_id
        user_id = self._identity(cluster_id, Kind.UNIX_USER, user, at)
        if user_id is None and uid is not None:
            user_id = self._identity(cluster_id, Kind.UNIX_UID, str(uid), at)
        if user_id is None:
            return None
        return _in_force(self._billing.get(user_id, []), at)
