"""What the apps built on the domain apps add to them, without the domain apps importing
them (`docs/development.md`, "Layering").

An app contributes by declaring lists in a module `<app>/contributions.py`:

- `PAGE_SECTIONS`: `gpuquota.core.sections.Section`s placed on another app's page;
- `METRICS_COLLECTORS`: Prometheus collectors added to every `/metrics` scrape;
- `DEMO_SEEDS`: functions `seed(*, now) -> str | None` that `seed_demo` runs after the
  demo's own seeds (the text, if any, is printed);
- `ATTENTION`: functions `items(now) -> list[gpuquota.core.attention.Attention]`: what
  waits for an admin, counted and linked on the admin's home page;
- `ASSIGNMENT_ENDING`: functions `hook(*, assignment, at)` that the reservations' services
  call, in their transaction, before an assignment's end moves earlier to `at` (lending
  ends the assignment's loans there).
- `RESERVATIONS_CHANGED`: functions `hook(*, reason)` that the reservations' services call,
  in their transaction, once a reservation, quota or maintenance block changed what the
  schedulers must hold (the scheduler backends reconcile after the commit).
- `LOAN_OWNER_JOB`: functions `hook(*, loan, job_id, asked_at, freed_at)` that the
  scheduler backends call when the scheduler shows a job of the reserving team holding an
  open loan's GPU (its owner took it back): lending ends the loan as `owner_job`, asked at
  `asked_at` (the job's submission) and freed at `freed_at` (its start).
- `RESERVATION_REQUESTED`: functions `hook(*, team, gpu_class, count, start, end, now)`
  that the reservations' services call, in their transaction, before a new reservation
  (not an admin's backfill) is written, an extension adds [old end, new end) or an
  approval books a pending request from max(start, now); a hook
  refuses it by raising a `DomainError`
  (reports: a budget's action at 100 %, docs/budgets.md).
- `RECOMPUTE_HORIZON`: functions `hook(*, start, end=None, gpu_id=None, gpu_class_id=None)`
  returning the raw-data horizon when figures derived from the GPU's (or class's) hours
  from `start` (before `end`) lie before it, so could not be recomputed, else None: asked
  before a change re-attributes or re-prices past hours: a GPU's history or health, a
  rate card (usage answers for its rollups).
- `RATE_CARD_CHANGED`: functions `hook(*, gpu_class_id, start, end, card_id) -> int` that
  the rates' services call, in their transaction, once the card in force for a class over
  [start, end) is `card_id`; they re-price what they derived and return the GPU-hours
  they marked for recompute (usage: its rollups).
- `GPUS_HELD_OUT`: functions `hook(*, gpu_ids, start, end)` returning
  `(gpu_id, valid_from, valid_until or None)` rows: spans in which one of `gpu_ids` is kept
  from new assignments and loans though no health interval or maintenance block says so
  (reliability: a GPU drained until the fix its failure needs). Capacity reads them like
  maintenance blocks.
- `GPUS_DRAINED`: functions `hook(*, cluster_id)` returning `(hostname, index, reason,
  at_once)` rows: the GPUs of the cluster drained one by one on the scheduler now
  (reliability: a DRA DeviceTaintRule each), which the scheduler backends keep in their
  plan so that the reconcile loop shows, keeps and repairs them like its other objects.
- `POD_RUNS`: functions `hook(*, since, as_of)` returning `(cluster_id, namespace, pod,
  started_at, ended_at or None, gpu_id)` rows, one per pod run and GPU it held (a MIG
  device as its physical GPU), of the Kubernetes pods that started by `as_of` and ran after
  `since` (None: all): the jobs app's collected pods, which reliability's lemon test reads
  for the job-days its killed pods are set against.
- `TEAM_EVENT`: functions `hook(*, team_id, key, message)` that an app calls (through
  `team_event`), in the transaction of the change, when something happened that the team
  should hear of where it reads (approvals, loans, reclaim notices, drains, statements):
  `message` is a `gpuquota.outbox.render.Message` and `key` names the event once (a retry
  queues nothing more). Reports queues it to the team's channels (docs/budgets.md,
  "Channels"); mail stays with the app that sends it.
- `ADMIN_EVENT`: functions `hook(*, key, message)` that an app calls (through
  `admin_event`), in the transaction of the change, when something happened that the
  platform's admins should hear of where they read, whatever team it concerns (a request
  waiting for approval, an objection to a reclaim, a GPU failed or drained, a node silent,
  statements to approve). Reports queues it to the organisation's channels
  (docs/budgets.md, "Channels for the admins"). The event types are
  `gpuquota.outbox.events.ADMIN_EVENTS` (a team's: `TEAM_EVENTS`).
- `USER_EVENT`: functions `hook(*, user_id, key, message)` that an app calls (through
  `user_event`), in the transaction of the change, when something happened that one user
  should hear of on the channels they added themselves (their jobs' zero-use warnings and
  waste: `gpuquota.outbox.events.USER_EVENTS`). Reports queues it to the user's channels.

They are found here, in INSTALLED_APPS order, the way Celery's beat schedules are
(`gpuquota/celery.py`), and checked when Django starts (`contributions_check`).
"""

from datetime import datetime
from functools import cache
from importlib import import_module
from importlib.util import find_spec

from django.apps import apps
from django.core import checks

MODULE = "contributions"
KINDS = ("PAGE_SECTIONS", "METRICS_COLLECTORS", "DEMO_SEEDS", "ATTENTION",
         "ASSIGNMENT_ENDING", "RESERVATIONS_CHANGED", "RESERVATION_REQUESTED", "LOAN_OWNER_JOB",
         "RECOMPUTE_HORIZON", "RATE_CARD_CHANGED", "GPUS_HELD_OUT", "GPUS_DRAINED",
         "POD_RUNS",
         "TEAM_EVENT", "ADMIN_EVENT", "USER_EVENT")


@cache
def contributed(kind: str) -> tuple:
    """Every installed app's `contributions.<kind>` entries, in INSTALLED_APPS order."""
    if kind not in KINDS:
        raise ValueError(f"Unknown kind of contribution {kind!r}: one of {', '.join(KINDS)}.")
    found: list = []
    for config in apps.get_app_configs():
        name = f"{config.name}.{MODULE}"
        if find_spec(name) is not None:
            found.extend(getattr(import_module(name), kind, ()))
    return tuple(found)


def hooks_call(kind: str, /, **kwargs) -> list:
    """Call every contributed hook of `kind` with `kwargs`, in order; their results."""
    return [hook(**kwargs) for hook in contributed(kind)]


def recompute_horizon(*, start: datetime, end: datetime | None = None,
                      gpu_id: int | None = None,
                      gpu_class_id: int | None = None) -> datetime | None:
    """The latest horizon the `RECOMPUTE_HORIZON` hooks give for these hours; None when
    every app could recompute what it derived from them."""
    return max(filter(None, hooks_call("RECOMPUTE_HORIZON", start=start, end=end, gpu_id=gpu_id,
                                       gpu_class_id=gpu_class_id)), default=None)


def gpus_held_out(*, gpu_ids, start: datetime, end: datetime) -> list[tuple]:
    """Every `GPUS_HELD_OUT` hook's spans overlapping [start, end) for `gpu_ids`."""
    if not contributed("GPUS_HELD_OUT"):
        return []
    gpu_ids = list(gpu_ids)
    return [row for rows in hooks_call("GPUS_HELD_OUT", gpu_ids=gpu_ids, start=start, end=end)
            for row in rows]


def team_event(*, team_id: int, key: str, message) -> None:
    """Tell the team's channels of an event (every `TEAM_EVENT` hook), in the caller's
    transaction; once per `key` and channel."""
    hooks_call("TEAM_EVENT", team_id=team_id, key=key, message=message)


def admin_event(*, key: str, message) -> None:
    """Tell the platform admins' channels of an event (every `ADMIN_EVENT` hook), in the
    caller's transaction; once per `key` and channel."""
    hooks_call("ADMIN_EVENT", key=key, message=message)


def user_event(*, user_id: int, key: str, message) -> None:
    """Tell a user's own channels of an event (every `USER_EVENT` hook), in the caller's
    transaction; once per `key` and channel."""
    hooks_call("USER_EVENT", user_id=user_id, key=key, message=message)


def contributions_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """An error for a contributions module that cannot be loaded (a section naming an
    unknown page, slot or page argument raises as it is declared)."""
    errors = []
    for kind in KINDS:
        try:
            contributed(kind)
        except (ImportError, TypeError, ValueError) as exc:
            errors.append(checks.Error(f"{kind}: {exc}", id="core.E001",
                                       hint="See docs/development.md, \"Layering\"."))
    return errors
