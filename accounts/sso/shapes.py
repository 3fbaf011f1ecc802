"""What the mapping rules' save check knows of the claims providers send: every login
records, per provider, each claim's path (dotted into objects and through lists of
objects) and the shape of its value (a name, a list of names, an object...), never the
value; kept GPUQUOTA_SSO_CLAIM_SHAPES_DAYS. A rule is then checked against all the claims
recent logins carried, not only those kept with each person's last login (a claim too large
to keep, or a login refused, is known too)."""

import difflib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import QuerySet

from accounts.models import ClaimShape, MappingRule
from accounts.sso import conf
from accounts.sso.claims import DISTRIBUTED, HAS_GROUPS

Shape = ClaimShape.Shape
#: Shapes a rule can read (a withheld claim is no fault of the rule).
READABLE = {Shape.NAME, Shape.NAMES, Shape.NULL, Shape.WITHHELD}
#: Claims never recorded: they may carry a secret, are a login's own, or are gpuquota's.
NOT_RECORDED = frozenset({"_claim_sources", "nonce", "at_hash", "c_hash", DISTRIBUTED})
PATHS_MAX = 256
DEPTH_MAX = 4
PATH_MAX = 255
#: A shape seen again within this is not written again (the window is days long).
RECORD_EVERY = timedelta(days=1)


def _is_name(value) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def shape_of(value) -> str:
    """The shape of one claim's value."""
    if value is None:
        return Shape.NULL
    if _is_name(value):
        return Shape.NAME
    if isinstance(value, dict):
        return Shape.OBJECT
    if isinstance(value, list):
        if all(_is_name(v) for v in value):
            return Shape.NAMES
        return Shape.OBJECTS if all(isinstance(v, dict) for v in value) else Shape.LIST
    return Shape.OTHER


def claim_shapes(claims: dict) -> dict[str, set[str]]:
    """Each path of `claims` (at most PATHS_MAX, DEPTH_MAX deep) with the shapes found
    there; a claim the provider withheld (`_claim_names`, `hasgroups`) is `withheld`."""
    found: dict[str, set[str]] = {}

    def add(path: str, shape: str) -> None:
        if len(path) <= PATH_MAX and (path in found or len(found) < PATHS_MAX):
            found.setdefault(path, set()).add(shape)

    def walk(node: dict, prefix: str, depth: int) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            add(path, shape_of(value))
            if depth >= DEPTH_MAX:
                continue
            for inner in ([value] if isinstance(value, dict) else
                          [v for v in value if isinstance(v, dict)]
                          if isinstance(value, list) else []):
                walk(inner, path, depth + 1)

    if not isinstance(claims, dict):
        return found
    walk({k: v for k, v in claims.items() if k not in NOT_RECORDED
          and not str(k).startswith("_gpuquota")}, "", 1)
    distributed = claims.get(DISTRIBUTED)
    for name in (distributed if isinstance(distributed, dict) else {}):
        add(str(name), Shape.WITHHELD)
    if claims.get(HAS_GROUPS) is True:
        add("groups", Shape.WITHHELD)
    return found


def claim_shapes_record(*, provider: str, claims: dict, now: datetime) -> None:
    """Remember the paths and shapes of one login's claims: those not seen through this
    provider in the last day are written (one statement); the others, most logins' all,
    cost one read."""
    seen = claim_shapes(claims)
    fresh = set(ClaimShape.objects.filter(provider=provider, path__in=list(seen),
                                          last_seen_at__gte=now - RECORD_EVERY)
                .values_list("path", "shape"))
    rows = [ClaimShape(provider=provider, path=path, shape=shape, first_seen_at=now,
                       last_seen_at=now)
            for path, shapes in sorted(seen.items())  # one order: no deadlock between two
            for shape in sorted(shapes) if (path, shape) not in fresh]
    if rows:
        ClaimShape.objects.bulk_create(rows, update_conflicts=True,
                                       unique_fields=["provider", "path", "shape"],
                                       update_fields=["last_seen_at"])


def claim_shapes_prune(*, now: datetime) -> int:
    """Forget the paths and shapes no login carried in GPUQUOTA_SSO_CLAIM_SHAPES_DAYS."""
    cutoff = now - timedelta(days=conf.claim_shapes_days())
    return ClaimShape.objects.filter(last_seen_at__lt=cutoff).delete()[0]


def claim_shapes_recent(*, provider: str, now: datetime) -> QuerySet[ClaimShape]:
    """The paths and shapes of the logins through `provider` (empty: any) lately."""
    shapes = ClaimShape.objects.filter(
        last_seen_at__gte=now - timedelta(days=conf.claim_shapes_days()))
    return shapes.filter(provider=provider) if provider else shapes


@dataclass
class ClaimReview:
    """A rule's claim against the recent logins: `problem` refuses the rule; `warnings`
    are said when it is saved."""

    problem: str = ""
    warnings: list[str] = field(default_factory=list)


def _quoted(paths) -> str:
    return ", ".join(f"“{p}”" for p in paths)


def rule_claim_review(*, rule: MappingRule, now: datetime) -> ClaimReview:
    """Whether the recent logins through the rule's provider carried its claim as names:
    refused when they carried it as something else (with the paths inside it that hold
    names); warned when none carried it (with the closest paths they did carry) or the
    provider withheld it at each. Nothing is said when no login is known."""
    rows = list(claim_shapes_recent(provider=rule.provider, now=now)
                .values_list("provider", "path", "shape"))
    if not rows:
        return ClaimReview()
    days = conf.claim_shapes_days()
    through = f" through {rule.provider}" if rule.provider else ""
    who = f"logins{through}"
    here = {shape for _, path, shape in rows if path == rule.claim}
    readable = sorted({path for _, path, shape in rows if shape in READABLE})
    unreadable = sorted(here - READABLE)
    if unreadable:
        kinds = " or ".join(Shape(s).label for s in unreadable)
        inside = [p for p in readable if p.startswith(f"{rule.claim}.")][:3]
        hint = f"; name a path inside it, e.g. {_quoted(inside)}" if inside else ""
        return ClaimReview(problem=f"“{rule.claim}” is {kinds} in {who} of the last {days} "
                           f"days, not a name or a list of names: a rule reads a name or a "
                           f"list of names{hint}.")
    if not here:
        close = difflib.get_close_matches(rule.claim, readable, n=3, cutoff=0.6)
        hint = (f"; did you mean {_quoted(close)}?" if close
                else f"; they carried {_quoted(readable[:8])}" if readable else ".")
        return ClaimReview(warnings=[f"No login{through} of the last {days} days carried "
                                     f"“{rule.claim}”: the rule matches nobody yet{hint}"])
    if here == {Shape.WITHHELD}:
        return ClaimReview(warnings=[
            f"The provider withheld “{rule.claim}” in every one of the {who} of the last "
            f"{days} days that named it (a link instead, as Entra ID's group overage): the "
            "rule decides nothing for those people until the claim arrives (docs/sso.md)."])
    return ClaimReview()
