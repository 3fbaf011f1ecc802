"""`manage.py bootstrap`: a site's first day (docs/first-day.md). Asks for what it needs,
or takes it all as flags with `--no-input`; running it again keeps what exists."""

import argparse
import getpass
import os
import sys
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_email

from accounts.models import User
from gpuquota.core.errors import DomainError
from gpuquota.inventory.models import Cluster, GpuClass
from gpuquota.reservations.site_setup import (
    AdminSpec,
    ClusterSpec,
    GpuClassSpec,
    SiteSpec,
    TeamSpec,
    site_bootstrap,
)

PASSWORD_ENV = "GPUQUOTA_ADMIN_PASSWORD"
EXAMPLE = """examples:
  manage.py bootstrap                       # asks for everything
  GPUQUOTA_ADMIN_PASSWORD=... manage.py bootstrap --no-input --admin admin \\
    --admin-email ops@example.org --cluster hpc:slurm:"HPC cluster" \\
    --gpu-class "H100-80GB=NVIDIA H100 80GB HBM3" --rates H100-80GB=2.50,3.00,1.50 \\
    --team vision=Vision --cost-center vision=CC-4100 --quota vision:H100-80GB=8"""


def _pair(value: str, sep: str, flag: str) -> tuple[str, str]:
    left, found, right = value.partition(sep)
    if not found or not left.strip() or not right.strip():
        raise CommandError(f"{flag} {value!r}: expected LEFT{sep}RIGHT")
    return left.strip(), right.strip()


def _decimal(value: str, what: str) -> Decimal:
    try:
        amount = Decimal(value.strip())
    except InvalidOperation as exc:
        raise CommandError(f"{what}: {value!r} is not a number") from exc
    if not amount.is_finite() or amount < 0:
        raise CommandError(f"{what}: {value!r} must be a number of 0 or more")
    return amount


def _rates(value: str) -> tuple[Decimal, Decimal, Decimal | None]:
    parts = value.split(",")
    if len(parts) not in (2, 3):
        raise CommandError(f"--rates {value!r}: expected RESERVED,ON_DEMAND[,BORROWED]")
    reserved = _decimal(parts[0], "the reserved rate")
    on_demand = _decimal(parts[1], "the on-demand rate")
    borrowed = _decimal(parts[2], "the borrowed rate") if len(parts) == 3 else None
    return reserved, on_demand, borrowed


def _cluster(value: str) -> ClusterSpec:
    slug, _, rest = value.partition(":")
    scheduler, _, name = rest.partition(":")
    return ClusterSpec(slug=slug.strip(), scheduler=scheduler.strip() or Cluster.Scheduler.NONE,
                       name=name.strip())


def _site_from_flags(options) -> SiteSpec:
    """The site the flags describe (possibly nothing)."""
    models: dict[str, list[str]] = {}
    for value in options["gpu_class"]:
        name, _, model = value.partition("=")
        models.setdefault(name.strip(), [])
        if model.strip():
            models[name.strip()].append(model.strip())
    rates = {}
    for value in options["rates"]:
        name, card = _pair(value, "=", "--rates")
        rates[name] = _rates(card)
        models.setdefault(name, [])
    classes = tuple(GpuClassSpec(name=name, model_names=tuple(found),
                                 **_rate_fields(rates.get(name)))
                    for name, found in models.items())
    teams: dict[str, dict] = {}
    for value in options["team"]:
        slug, _, name = value.partition("=")
        teams.setdefault(slug.strip(), {"quotas": {}})["name"] = name.strip()
    for value in options["cost_center"]:
        slug, code = _pair(value, "=", "--cost-center")
        teams.setdefault(slug, {"quotas": {}})["cost_center"] = code
    for value in options["quota"]:
        team_class, gpus = _pair(value, "=", "--quota")
        slug, class_name = _pair(team_class, ":", "--quota")
        if not gpus.isdigit():
            raise CommandError(f"--quota {value!r}: the GPUs are a whole number")
        teams.setdefault(slug, {"quotas": {}})["quotas"][class_name] = int(gpus)
    admin = None
    if options["admin"]:
        admin = AdminSpec(username=options["admin"], email=options["admin_email"] or "",
                          password=os.environ.get(PASSWORD_ENV, ""))
    return SiteSpec(admin=admin, clusters=tuple(_cluster(c) for c in options["cluster"]),
                    gpu_classes=classes,
                    teams=tuple(TeamSpec(slug=slug, **fields) for slug, fields in teams.items()),
                    currency=options["currency"])


def _rate_fields(card) -> dict:
    if card is None:
        return {}
    return {"reserved_rate": card[0], "on_demand_rate": card[1], "borrowed_rate": card[2]}


class Command(BaseCommand):
    help = ("A site's first day: the first platform admin, clusters, GPU classes with their "
            "NVML model names and rate cards, teams and quotas. Asks for what the flags do not "
            "give (none with --no-input); keeps whatever exists, so it can run again. "
            "The admin's password comes from $GPUQUOTA_ADMIN_PASSWORD or is asked for.")
    stealth_options = ("stdin",)  # where the answers come from (tests); the terminal's

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.epilog = EXAMPLE
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        return parser

    def add_arguments(self, parser):
        parser.add_argument("--no-input", action="store_false", dest="interactive",
                            help="ask nothing: use the flags only")
        parser.add_argument("--admin", metavar="USERNAME", help="the first platform admin")
        parser.add_argument("--admin-email", metavar="EMAIL")
        parser.add_argument("--cluster", action="append", default=[],
                            metavar="SLUG[:SCHEDULER[:NAME]]",
                            help="a cluster; SCHEDULER is slurm, kubernetes or none (repeat)")
        parser.add_argument("--gpu-class", action="append", default=[],
                            metavar="CLASS=NVML MODEL NAME",
                            help="a GPU class and an NVML model name that belongs to it, as "
                                 "nvidia-smi --query-gpu=name prints it (repeat for more)")
        parser.add_argument("--rates", action="append", default=[],
                            metavar="CLASS=RESERVED,ON_DEMAND[,BORROWED]",
                            help="a class's rates per GPU-hour (repeat)")
        parser.add_argument("--currency", default="USD", help="of the rates (default USD)")
        parser.add_argument("--team", action="append", default=[], metavar="SLUG[=NAME]")
        parser.add_argument("--cost-center", action="append", default=[],
                            metavar="SLUG=CODE")
        parser.add_argument("--quota", action="append", default=[],
                            metavar="TEAM:CLASS=GPUS", help="GPUs guaranteed from now (repeat)")

    def handle(self, *args, interactive: bool, **options):
        self._input = options.get("stdin") or sys.stdin
        site = _site_from_flags(options)
        if interactive:
            site = self._ask(site)
        try:
            lines = site_bootstrap(site=site)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        for line in lines:
            self.stdout.write(line)
        self.stdout.write(self.style.SUCCESS(
            "Done. Next: log in as the admin, enrol the nodes' agents (docs/first-day.md)."))

    # --- questions -------------------------------------------------------------------

    def _line(self, question: str, default: str = "") -> str:
        self.stdout.write(f"{question}{f' [{default}]' if default else ''}: ", ending="")
        self.stdout.flush()
        answer = self._input.readline()
        if not answer:
            raise CommandError("no more input: run it again, or with --no-input and flags")
        return answer.strip() or default

    def _password(self) -> str:
        while True:
            if self._input is sys.stdin and sys.stdin.isatty():
                first, second = getpass.getpass("Password: "), getpass.getpass("Again: ")
            else:
                first, second = self._line("Password"), self._line("Again")
            if first and first == second:
                return first
            self.stderr.write("The two passwords differ or are empty; again.")

    def _ask(self, site: SiteSpec) -> SiteSpec:
        admin = site.admin
        if admin is None and not User.objects.filter(is_staff=True, is_active=True).exists():
            self.stdout.write("The first platform admin (a local account, for break-glass "
                              "use once single sign-on is on).")
            admin = AdminSpec(username=self._line("Username", "admin"))
        if admin is not None and not User.objects.filter(username=admin.username).exists():
            email = admin.email or self._valid(lambda: self._line("Email"), _email)
            admin = AdminSpec(username=admin.username, email=email,
                              password=admin.password or self._password())
        clusters = site.clusters or self._ask_clusters()
        currency = site.currency
        classes = site.gpu_classes
        if not classes:
            currency = self._line("Currency of the rates", site.currency)
            classes = self._ask_classes(currency)
        teams = site.teams or self._ask_teams(classes)
        return SiteSpec(admin=admin, clusters=clusters, gpu_classes=classes, teams=teams,
                        currency=currency, rates_from=site.rates_from)

    def _valid(self, ask, parse):
        """Ask until `parse` takes the answer; its value."""
        while True:
            try:
                return parse(ask())
            except (ValueError, ValidationError, CommandError) as exc:
                self.stderr.write(f"{' '.join(getattr(exc, 'messages', [str(exc)]))} Again.")

    def _ask_clusters(self) -> tuple[ClusterSpec, ...]:
        self.stdout.write("Clusters (an empty slug goes on). The slug is how agents and "
                          "`manage.py node_token --cluster` name it.")
        found = []
        while slug := self._line("Cluster slug, e.g. hpc"):
            scheduler = self._valid(
                lambda: self._line("Scheduler: slurm, kubernetes or none", "slurm"),
                _scheduler)
            found.append(ClusterSpec(slug=slug, scheduler=scheduler,
                                     name=self._line("Its name", slug)))
        return tuple(found)

    def _ask_classes(self, currency: str) -> tuple[GpuClassSpec, ...]:
        self.stdout.write(
            "GPU classes: what teams reserve and are billed for (an empty name goes on). "
            "Each has the NVML model names of its GPUs, as `nvidia-smi --query-gpu=name "
            "--format=csv,noheader` prints them, and rates per GPU-hour.")
        known = ", ".join(GpuClass.objects.values_list("name", flat=True))
        if known:
            self.stdout.write(f"Existing classes (kept as they are): {known}")
        found = []
        while name := self._line("GPU class, e.g. H100-80GB"):
            models = self._line("Its NVML model names, separated by ';'")
            rates = {}
            if self._line("Its rates now (y/n)", "y").lower().startswith("y"):
                rates = _rate_fields(self._valid(lambda: self._ask_rates(currency), _rates))
            found.append(GpuClassSpec(name=name, model_names=tuple(
                m.strip() for m in models.split(";") if m.strip()), **rates))
        return tuple(found)

    def _ask_rates(self, currency: str) -> str:
        """The three rates as --rates takes them."""
        rates = [self._line(f"Reserved rate ({currency} per reserved GPU-hour)"),
                 self._line(f"On-demand rate ({currency} per busy unreserved GPU-hour)"),
                 self._line(f"Borrowed rate ({currency} per busy borrowed GPU-hour; empty: "
                            "the on-demand rate)")]
        return ",".join(rate for rate in rates if rate)

    def _ask_teams(self, classes) -> tuple[TeamSpec, ...]:
        names = [c.name for c in classes] or list(GpuClass.objects.values_list("name",
                                                                                flat=True))
        self.stdout.write("Teams (an empty slug goes on); people join them through single "
                          "sign-on's mapping rules or the admin.")
        found = []
        while slug := self._line("Team slug, e.g. vision"):
            name = self._line("Its name", slug.title())
            cost_center = self._line("Cost-center code (on its statements)")
            quotas = {}
            for class_name in names:
                gpus = self._valid(lambda c=class_name: self._line(f"Quota of {c} (GPUs)", "0"),
                                   _whole)
                if gpus:
                    quotas[class_name] = gpus
            found.append(TeamSpec(slug=slug, name=name, cost_center=cost_center, quotas=quotas))
        return tuple(found)


def _email(value: str) -> str:
    validate_email(value)
    return value


def _scheduler(value: str) -> str:
    if value not in Cluster.Scheduler.values:
        raise ValueError("The scheduler is one of slurm, kubernetes, none.")
    return value


def _whole(value: str) -> int:
    if not value.isdigit():
        raise ValueError("A whole number of GPUs.")
    return int(value)
