"""`manage.py bootstrap` (docs/first-day.md): from an empty database to a site an admin logs
into, whose agents' GPUs land in the right classes and whose teams can reserve; asked
interactively or given as flags; idempotent."""

import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client

from accounts.models import Team, User
from gpuquota.core.models import AuditEntry
from gpuquota.inventory.models import Cluster, Gpu, GpuClass, GpuModelMapping, Node
from gpuquota.inventory.services import gpu_register
from gpuquota.rates.models import RateCard
from gpuquota.reservations.models import Quota, Reservation
from gpuquota.reservations.services import reservation_create

pytestmark = pytest.mark.django_db
NOW = datetime(2027, 3, 17, 10, 30, 15, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
FLAGS = ["--no-input", "--admin", "ops", "--admin-email", "ops@example.org",
         "--cluster", "hpc:slurm:HPC cluster", "--cluster", "k8s:kubernetes",
         "--gpu-class", f"H100-80GB={H100}", "--gpu-class", "H100-80GB=NVIDIA H100 PCIe",
         "--gpu-class", "L4=NVIDIA L4", "--rates", "H100-80GB=2.50,3.00,1.50",
         "--rates", "L4=0.60,0.80", "--currency", "EUR",
         "--team", "vision=Vision", "--cost-center", "vision=CC-4100",
         "--quota", "vision:H100-80GB=8", "--quota", "vision:L4=2", "--team", "nlp=NLP"]


def _bootstrap(*argv: str, stdin: str | None = None) -> str:
    out = io.StringIO()
    extra = {"stdin": io.StringIO(stdin)} if stdin is not None else {}
    with time_machine.travel(NOW, tick=False):
        call_command("bootstrap", *argv, stdout=out, stderr=io.StringIO(), **extra)
    return out.getvalue()


def _site_rows() -> dict:
    return {model.__name__: model.objects.count() for model in
            (User, Cluster, GpuClass, GpuModelMapping, RateCard, Team, Quota, AuditEntry)}


def test_flags_set_up_an_empty_site_and_the_admin_logs_in(monkeypatch):
    monkeypatch.setenv("GPUQUOTA_ADMIN_PASSWORD", "first-day-secret")
    output = _bootstrap(*FLAGS)
    assert "admin ops: created" in output
    admin = User.objects.get(username="ops")
    assert admin.is_staff and admin.is_superuser and admin.email == "ops@example.org"
    client = Client()
    response = client.post("/accounts/login/", {"username": "ops",
                                                "password": "first-day-secret"})
    assert response.status_code == 302
    assert client.get("/manage/quotas/").status_code == 200
    assert {(c.slug, c.name, c.scheduler) for c in Cluster.objects.all()} == {
        ("hpc", "HPC cluster", "slurm"), ("k8s", "k8s", "kubernetes")}
    assert dict(GpuModelMapping.objects.values_list("model_name", "gpu_class__name")) == {
        H100: "H100-80GB", "NVIDIA H100 PCIe": "H100-80GB", "NVIDIA L4": "L4"}
    h100 = RateCard.objects.get(gpu_class__name="H100-80GB")
    # From the first second of the month, so this month's statements find a card.
    assert h100.valid_from == datetime(2027, 3, 1, tzinfo=UTC) and h100.valid_until is None
    assert (h100.reserved_rate, h100.on_demand_rate, h100.borrowed_rate, h100.currency) == (
        Decimal("2.50"), Decimal("3.00"), Decimal("1.50"), "EUR")
    l4 = RateCard.objects.get(gpu_class__name="L4")
    assert l4.borrowed_rate == Decimal("0.80")  # no borrowed rate: the on-demand one
    vision = Team.objects.get(slug="vision")
    assert (vision.name, vision.cost_center) == ("Vision", "CC-4100")
    assert sorted(Quota.objects.filter(team=vision).values_list("gpu_class__name", "gpus")) == [
        ("H100-80GB", 8), ("L4", 2)]
    assert Quota.objects.get(team=vision, gpu_class__name="L4").valid_from == NOW.replace(
        second=15)
    assert Team.objects.get(slug="nlp").name == "NLP"
    assert AuditEntry.objects.filter(action="rate_card.create", actor=admin).count() == 2


def test_running_it_again_keeps_everything(monkeypatch):
    monkeypatch.setenv("GPUQUOTA_ADMIN_PASSWORD", "first-day-secret")
    _bootstrap(*FLAGS)
    before = _site_rows()
    output = _bootstrap(*FLAGS)
    assert _site_rows() == before
    assert "admin ops: kept" in output and "team vision: kept" in output
    assert "quota of H100-80GB: kept (8 GPUs)" in output
    assert "rates of L4: kept" in output


def test_what_exists_is_kept_and_said_so(monkeypatch):
    monkeypatch.setenv("GPUQUOTA_ADMIN_PASSWORD", "x")
    _bootstrap(*FLAGS)
    output = _bootstrap("--no-input", "--gpu-class", "L4=" + H100, "--rates", "L4=9,9",
                        "--quota", "vision:L4=5")
    assert f"model '{H100}': kept as H100-80GB, not L4" in output
    assert GpuModelMapping.objects.get(model_name=H100).gpu_class.name == "H100-80GB"
    assert RateCard.objects.get(gpu_class__name="L4").reserved_rate == Decimal("0.60")
    assert Quota.objects.get(team__slug="vision", gpu_class__name="L4").gpus == 2


def test_gpus_an_agent_reported_before_the_mapping_move_to_their_class(monkeypatch):
    """An agent started before the admin ran bootstrap: its GPUs got a class named after
    their model; mapping the model moves them from the bootstrap on."""
    hpc = Cluster.objects.create(slug="hpc", name="hpc")
    node = Node.objects.create(cluster=hpc, hostname="gpu-01")
    gpu = gpu_register(node=node, uuid="GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
                       model_name=H100, at=NOW - timedelta(hours=1))
    assert gpu.gpu_class.name == H100
    monkeypatch.setenv("GPUQUOTA_ADMIN_PASSWORD", "x")
    _bootstrap(*FLAGS)
    assert Gpu.objects.get(pk=gpu.pk).gpu_class.name == "H100-80GB"


def test_after_bootstrap_the_admin_reserves_for_a_team(monkeypatch):
    monkeypatch.setenv("GPUQUOTA_ADMIN_PASSWORD", "x")
    _bootstrap(*FLAGS)
    node = Node.objects.create(cluster=Cluster.objects.get(slug="hpc"), hostname="gpu-01")
    for index in range(2):
        gpu_register(node=node, uuid=f"GPU-00000000-0000-0000-0000-00000000000{index}",
                     model_name=H100, at=NOW, index=index)
    with time_machine.travel(NOW + timedelta(minutes=5), tick=False):
        reservation = reservation_create(
            team=Team.objects.get(slug="vision"), gpu_class=GpuClass.objects.get(
                name="H100-80GB"), count=2, start=NOW + timedelta(hours=1),
            end=NOW + timedelta(hours=5), requested_by=User.objects.get(username="ops"))
    assert reservation.status == Reservation.Status.SCHEDULED
    assert reservation.assignments.count() == 2


def test_asked_interactively():
    answers = "\n".join([
        "", "ops@example.org", "pw", "pw",              # admin (default name), email, password
        "hpc", "", "HPC",                                # a cluster: slurm by default
        "",                                              # no more clusters
        "",                                              # currency: USD
        "H100-80GB", f"{H100}; NVIDIA H100 PCIe", "y", "2.50", "3.00", "",
        "",                                              # no more classes
        "vision", "", "CC-4100", "8",                    # a team and its H100 quota
        "",                                              # no more teams
    ]) + "\n"
    output = _bootstrap(stdin=answers)
    assert "admin admin: created" in output
    assert User.objects.get(username="admin").check_password("pw")
    assert Cluster.objects.get(slug="hpc").scheduler == "slurm"
    assert GpuModelMapping.objects.filter(gpu_class__name="H100-80GB").count() == 2
    card = RateCard.objects.get(gpu_class__name="H100-80GB")
    assert (card.reserved_rate, card.borrowed_rate, card.currency) == (
        Decimal("2.50"), Decimal("3.00"), "USD")
    vision = Team.objects.get(slug="vision")
    assert (vision.name, vision.cost_center) == ("Vision", "CC-4100")
    assert Quota.objects.get(team=vision).gpus == 8


def test_asked_again_on_a_bad_answer():
    answers = "\n".join(["", "not an email", "ops@example.org", "a", "b", "pw", "pw",
                         "hpc", "slurmm", "slurm", "", "", "", "", ""]) + "\n"
    err = io.StringIO()
    with time_machine.travel(NOW, tick=False):
        call_command("bootstrap", stdin=io.StringIO(answers), stdout=io.StringIO(),
                     stderr=err)
    assert "Enter a valid email address. Again." in err.getvalue()
    assert "The two passwords differ or are empty" in err.getvalue()
    assert "The scheduler is one of slurm, kubernetes, none. Again." in err.getvalue()
    assert Cluster.objects.get(slug="hpc").scheduler == "slurm"


def test_refusals_name_the_fault_and_leave_nothing_behind(monkeypatch):
    with pytest.raises(CommandError, match="No platform admin exists yet"):
        _bootstrap("--no-input", "--cluster", "hpc")
    with pytest.raises(CommandError, match="The first admin needs a password"):
        _bootstrap("--no-input", "--admin", "ops")
    monkeypatch.setenv("GPUQUOTA_ADMIN_PASSWORD", "x")
    with pytest.raises(CommandError, match="names the GPU class 'A100', which does not exist"):
        _bootstrap("--no-input", "--admin", "ops", "--team", "vision",
                   "--quota", "vision:A100=2")
    assert not User.objects.exists() and not Team.objects.exists()  # all or nothing
    with pytest.raises(CommandError, match="slug may hold only"):
        _bootstrap("--no-input", "--admin", "ops", "--team", "Vision Team")
    with pytest.raises(CommandError, match="expected RESERVED,ON_DEMAND"):
        _bootstrap("--no-input", "--admin", "ops", "--rates", "L4=1")


def test_a_break_glass_list_without_the_admin_is_said(monkeypatch, settings):
    settings.GPUQUOTA_LOCAL_LOGIN_USERS = "root-admin"
    monkeypatch.setenv("GPUQUOTA_ADMIN_PASSWORD", "x")
    output = _bootstrap("--no-input", "--admin", "ops")
    assert "GPUQUOTA_LOCAL_LOGIN_USERS does not list 'ops'" in output
