"""A site's first day (`manage.py bootstrap`, docs/first-day.md): the first admin, clusters,
GPU classes with their NVML model names and rate cards, teams and their quotas.

Every step is idempotent: what exists is kept as it is and said so (changes go through the
pages, which audit them), what is missing is created through the same services the pages
use. Running the same bootstrap twice changes nothing the second time.
"""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from accounts.models import Team, User
from accounts.sso import conf as sso_conf
from gpuquota.core.errors import DomainError
from gpuquota.core.fields import whole_second
from gpuquota.core.names import dns1123_label_error, slurm_name_error
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster, GpuClass, GpuModelMapping
from gpuquota.inventory.services import model_mapping_save
from gpuquota.rates.models import RateCard
from gpuquota.rates.services import rate_card_create
from gpuquota.reservations.models import Quota
from gpuquota.reservations.quotas import quota_create


@dataclass(frozen=True)
class AdminSpec:
    username: str
    email: str = ""
    password: str = ""


@dataclass(frozen=True)
class ClusterSpec:
    slug: str
    name: str = ""
    scheduler: str = Cluster.Scheduler.NONE


@dataclass(frozen=True)
class GpuClassSpec:
    name: str
    model_names: tuple[str, ...] = ()
    #: Per GPU-hour, in the site's currency; None: no rate card is made (add one later).
    reserved_rate: Decimal | None = None
    on_demand_rate: Decimal | None = None
    borrowed_rate: Decimal | None = None


@dataclass(frozen=True)
class TeamSpec:
    slug: str
    name: str = ""
    cost_center: str = ""
    #: GPU class name -> GPUs guaranteed from now on.
    quotas: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SiteSpec:
    admin: AdminSpec | None = None
    clusters: tuple[ClusterSpec, ...] = ()
    gpu_classes: tuple[GpuClassSpec, ...] = ()
    teams: tuple[TeamSpec, ...] = ()
    currency: str = "USD"
    #: Where new rate cards start; None: the first second of the current month (UTC), so the
    #: month's statements find a card for every second of it.
    rates_from: datetime | None = None


def _name_check(value: str, field_name: str, what: str) -> None:
    """A slug reaches Slurm (an account) and Kubernetes (a namespace, a label): both must
    take it."""
    error = dns1123_label_error(value, what=what) or slurm_name_error(value, what=what)
    if error:
        raise DomainError(error, field=field_name)


def site_admin_ensure(*, admin: AdminSpec) -> tuple[User, str]:
    """The platform admin `admin.username` exists and is staff: created with the password
    if missing; an existing user keeps their password."""
    user = User.objects.filter(username=admin.username).first()
    allowed = sso_conf.break_glass_users()
    warning = (f" (GPUQUOTA_LOCAL_LOGIN_USERS does not list {admin.username!r}: add it, or "
               "the password login refuses it)") if allowed and admin.username not in allowed \
        else ""
    if user is not None:
        if user.is_staff and user.is_superuser:
            return user, f"admin {user.username}: kept{warning}"
        user.is_staff = user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
        audit_record(actor=None, action="user.make_admin", obj=user,
                     changes={"is_staff": True}, reason="manage.py bootstrap")
        return user, f"admin {user.username}: made a platform admin{warning}"
    if not admin.password:
        raise DomainError("The first admin needs a password.", field="admin_password")
    user = User(username=admin.username, email=admin.email, is_staff=True, is_superuser=True)
    try:
        user.full_clean(exclude=["password"])
    except ValidationError as exc:
        raise DomainError("; ".join(exc.messages), field="admin") from exc
    user.set_password(admin.password)
    user.save()
    audit_record(actor=None, action="user.create_admin", obj=user,
                 changes={"username": user.username, "email": user.email},
                 reason="manage.py bootstrap")
    return user, f"admin {user.username}: created{warning}"


def site_cluster_ensure(*, cluster: ClusterSpec, by: User) -> tuple[Cluster, str]:
    """The cluster `cluster.slug` exists; an existing one keeps its name and scheduler."""
    _name_check(cluster.slug, "cluster", "A cluster's slug")
    if cluster.scheduler not in Cluster.Scheduler.values:
        raise DomainError(f"A cluster's scheduler is one of {', '.join(Cluster.Scheduler.values)}"
                          f", not {cluster.scheduler!r}.", field="cluster_scheduler")
    found = Cluster.objects.filter(slug=cluster.slug).first()
    if found is not None:
        return found, f"cluster {found.slug}: kept ({found.name}, {found.get_scheduler_display()})"
    made = Cluster.objects.create(slug=cluster.slug, name=cluster.name or cluster.slug,
                                  scheduler=cluster.scheduler)
    audit_record(actor=by, action="cluster.create", obj=made, reason="manage.py bootstrap",
                 changes={"slug": made.slug, "name": made.name, "scheduler": made.scheduler})
    return made, f"cluster {made.slug}: created ({made.name}, {made.get_scheduler_display()})"


def _model_mapping_ensure(gpu_class: GpuClass, model_name: str, by: User,
                          now: datetime) -> str:
    mapping = GpuModelMapping.objects.filter(model_name=model_name).select_related(
        "gpu_class").first()
    if mapping is not None and mapping.gpu_class_id == gpu_class.pk:
        return f"  model {model_name!r} -> {gpu_class.name}: kept"
    if mapping is not None:
        return (f"  model {model_name!r}: kept as {mapping.gpu_class.name}, not "
                f"{gpu_class.name} (change it in the admin's NVML model mappings)")
    model_mapping_save(mapping=GpuModelMapping(model_name=model_name, gpu_class=gpu_class),
                       actor=by, at=now)
    return f"  model {model_name!r} -> {gpu_class.name}: mapped"


def _rates_from(site: SiteSpec, now: datetime) -> datetime:
    if site.rates_from is not None:
        return whole_second(site.rates_from)
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def site_gpu_class_ensure(*, spec: GpuClassSpec, site: SiteSpec, by: User,
                          now: datetime) -> tuple[GpuClass, list[str]]:
    """The class exists, its NVML model names map to it, and it has a rate card: what
    exists is kept (a class priced already keeps its cards; change them on the rate-card
    page)."""
    if not spec.name or len(spec.name) > GpuClass._meta.get_field("name").max_length:
        raise DomainError("A GPU class needs a name of at most 64 characters.",
                          field="gpu_class")
    gpu_class, created = GpuClass.objects.get_or_create(
        name=spec.name, defaults={"description": ", ".join(spec.model_names)})
    if created:
        audit_record(actor=by, action="gpu_class.create", obj=gpu_class,
                     changes={"name": gpu_class.name}, reason="manage.py bootstrap")
    lines = [f"GPU class {gpu_class.name}: {'created' if created else 'kept'}"]
    lines += [_model_mapping_ensure(gpu_class, model, by, now) for model in spec.model_names]
    if RateCard.objects.filter(gpu_class=gpu_class).exists():
        lines.append(f"  rates of {gpu_class.name}: kept (the rate-card page changes them)")
    elif spec.reserved_rate is not None and spec.on_demand_rate is not None:
        card = rate_card_create(gpu_class=gpu_class, valid_from=_rates_from(site, now),
                                reserved_rate=spec.reserved_rate,
                                on_demand_rate=spec.on_demand_rate,
                                borrowed_rate=spec.borrowed_rate, currency=site.currency,
                                by=by, reason="manage.py bootstrap")
        lines.append(f"  rates of {gpu_class.name}: {card.reserved_rate} reserved, "
                     f"{card.on_demand_rate} on demand, {card.borrowed_rate} borrowed "
                     f"{card.currency}/GPU-h from {card.valid_from:%Y-%m-%d %H:%M} UTC")
    else:
        lines.append(f"  rates of {gpu_class.name}: none yet: its usage cannot be billed "
                     "until a rate card covers it")
    return gpu_class, lines


def site_team_ensure(*, spec: TeamSpec, by: User, now: datetime) -> tuple[Team, list[str]]:
    """The team exists with a quota of each class named; a team that has a quota of a class
    now or later keeps it (the quota page changes it)."""
    _name_check(spec.slug, "team", "A team's slug")
    team, created = Team.objects.get_or_create(
        slug=spec.slug, defaults={"name": spec.name or spec.slug,
                                  "cost_center": spec.cost_center})
    if created:
        audit_record(actor=by, action="team.create", obj=team, team=team,
                     changes={"slug": team.slug, "name": team.name,
                              "cost_center": team.cost_center},
                     reason="manage.py bootstrap")
    lines = [f"team {team.slug}: {'created' if created else 'kept'} ({team.name})"]
    for class_name, gpus in spec.quotas.items():
        gpu_class = GpuClass.objects.filter(name=class_name).first()
        if gpu_class is None:
            raise DomainError(f"Team {spec.slug}'s quota names the GPU class {class_name!r}, "
                              "which does not exist: add it first.", field="quota")
        current = Quota.objects.filter(team=team, gpu_class=gpu_class).exclude(
            valid_until__lte=now).order_by("valid_from").first()
        if current is not None:
            lines.append(f"  quota of {class_name}: kept ({current.gpus} GPUs)")
            continue
        quota = quota_create(team=team, gpu_class=gpu_class, gpus=gpus, valid_from=now, by=by,
                             reason="manage.py bootstrap", now=now)
        lines.append(f"  quota of {class_name}: {quota.gpus} GPUs from "
                     f"{quota.valid_from:%Y-%m-%d %H:%M} UTC")
    return team, lines


@transaction.atomic
def site_bootstrap(*, site: SiteSpec, now: datetime | None = None) -> list[str]:
    """Everything `site` describes exists, all or nothing; a line per step says what was
    created and what was kept."""
    now = whole_second(now or timezone.now())
    if site.admin is not None:
        admin, line = site_admin_ensure(admin=site.admin)
        lines = [line]
    else:
        admin = User.objects.filter(is_staff=True, is_active=True).order_by("pk").first()
        lines = []
        if admin is None:
            raise DomainError("No platform admin exists yet: name the first one.",
                              field="admin")
    for cluster in site.clusters:
        lines.append(site_cluster_ensure(cluster=cluster, by=admin)[1])
    for spec in site.gpu_classes:
        lines += site_gpu_class_ensure(spec=spec, site=site, by=admin, now=now)[1]
    for spec in site.teams:
        lines += site_team_ensure(spec=spec, by=admin, now=now)[1]
    return lines
