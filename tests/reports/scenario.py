"""October 2026, hand-computed to the cent (accounting.md: Chargeback), built through the
public interfaces: reservations and their release through the services, telemetry through
the agent protocol endpoint or stored as ingestion stores it, rollups by the sweep.

| line | seconds | rate | amount |
| --- | --- | --- | --- |
| vision reserved H100 (card A, to Oct 15 12:30) | 1,254,600 (R1) + 100,800 (R2) | 2.50 | 941.25 |
| vision reserved H100 (card B) | 1,423,800 (R1) | 2.75 | 1087.63 (1087.625 half up) |
| vision failure credit H100 (Oct 20 10:00 – 13:15, reboot) | 11,700 | 2.75 | −8.94 (−8.9375) |
| vision on-demand A100 MIG: 1800 alone + 1800/2 shared | 2,700 | 1.75 | 1.31 (1.3125) |
| vision on-demand H100 12:10–12:30 (card A) | 1,200 | 3.00 | 1.00 |
| vision on-demand H100 12:30–13:00 + 7/2 s (card B) | 1,803.5 → 1804 | 3.20 | 1.60 |
| vision adjustment | | | −100.00 |
| total | | | 1923.85 |
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.test import Client
from django.utils import timezone

from accounts.models import ClusterIdentity, Team, User
from gpuquota.ingest.models import ProcessRecord, Sample
from gpuquota.outbox.services import gpu_hours_mark_dirty
from gpuquota.reservations.services import reservation_release
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import (
    AdminFactory,
    GpuClassFactory,
    MembershipFactory,
    RateCardFactory,
    TeamFactory,
    UserFactory,
    make_gpu,
)
from tests.ingest.factories import Agent, batch, enrolled, event, sample
from tests.usage.factories import add_processes, add_samples, mig_device, minute_samples, reserve

OCT = datetime(2026, 10, 1, tzinfo=UTC)
NOV = datetime(2026, 11, 1, tzinfo=UTC)
RATE_CHANGE = datetime(2026, 10, 15, 12, 30, tzinfo=UTC)
FAILED_AT = datetime(2026, 10, 20, 10, 0, tzinfo=UTC)
REBOOT_SAMPLE_AT = datetime(2026, 10, 20, 13, 15, tzinfo=UTC)
AFTER_SETTLEMENT = datetime(2026, 11, 5, 12, 0, tzinfo=UTC)
H, M = timedelta(hours=1), timedelta(minutes=1)


@dataclass
class October:
    admin: User
    vision: Team
    speech: Team
    robotics: Team
    alice: User
    vision_lead: User


def _identity(cluster, kind, key, **target):
    ClusterIdentity.objects.create(cluster=cluster, kind=kind, key=key, valid_from=OCT - 40 * H,
                                   **target)


def _processes(gpu, start, seconds, owners):
    """Process records over one window, one per (user, slurm account), stored with its
    sample (the same batch: its `received_at`) where there is one."""
    now = Sample.objects.filter(gpu=gpu, window_start=start).values_list(
        "received_at", flat=True).first() or timezone.now()
    with transaction.atomic():
        ProcessRecord.objects.bulk_create([
            ProcessRecord(gpu=gpu, window_start=start,
                          window_end=start + timedelta(seconds=seconds), pid=200 + i,
                          pid_start=1, user=user, command="python",
                          job_source="slurm" if account else "unix", job_account=account,
                          received_at=now)
            for i, (user, account) in enumerate(owners)])
        gpu_hours_mark_dirty(marks=[(gpu.id, start)])


def _failure_and_reboot(time_machine, gpu, token):
    """The GPU falls off the bus under boot A; the node reboots (boot B) and the GPU
    reports a good sample at 13:15: the failed interval ends there."""
    agent = Agent(token, Client())

    def post(boot_id, **records):
        body = batch(**records)
        body["node"]["boot_id"] = boot_id
        response = agent.post(body)
        assert response.status_code == 202, response.content

    time_machine.move_to(FAILED_AT + 5 * M, tick=False)
    post("boot-a", samples=[sample(gpu.uuid, FAILED_AT - M)],
         events=[event(gpu.uuid, FAILED_AT, type_="xid", xid=79)])
    time_machine.move_to(REBOOT_SAMPLE_AT + 5 * M, tick=False)
    post("boot-b", samples=[sample(gpu.uuid, REBOOT_SAMPLE_AT)])


def october_build(time_machine) -> October:
    """The whole month; returns with the clock at AFTER_SETTLEMENT, rollups swept."""
    time_machine.move_to(OCT - 2 * H, tick=False)
    admin = AdminFactory(username="finance-admin")
    h100, a100 = GpuClassFactory(name="H100-80GB"), GpuClassFactory(name="A100-40GB")
    RateCardFactory(gpu_class=h100, valid_until=RATE_CHANGE, reserved_rate=Decimal("2.50"),
                    on_demand_rate=Decimal("3.00"))
    RateCardFactory(gpu_class=h100, valid_from=RATE_CHANGE, reserved_rate=Decimal("2.75"),
                    on_demand_rate=Decimal("3.20"))
    RateCardFactory(gpu_class=a100, reserved_rate=Decimal("1.50"),
                    on_demand_rate=Decimal("1.75"))
    vision = TeamFactory(name="Vision", slug="vision", cost_center="CC-100")
    speech = TeamFactory(name="Speech", slug="speech", cost_center="CC-200")
    robotics = TeamFactory(name="Robotics", slug="robotics", cost_center="CC-300")
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    vision_lead = UserFactory(username="vision-lead")
    MembershipFactory(user=alice, team=vision, is_billing=True)
    MembershipFactory(user=bob, team=speech, is_billing=True)
    MembershipFactory(user=vision_lead, team=vision, role="lead")

    issued = enrolled("gpu-node-07")
    node, cluster = issued.node, issued.node.cluster
    _identity(cluster, ClusterIdentity.Kind.UNIX_USER, "alice", user=alice)
    _identity(cluster, ClusterIdentity.Kind.UNIX_USER, "bob", user=bob)
    _identity(cluster, ClusterIdentity.Kind.SLURM_ACCOUNT, "robo", team=robotics)
    at = OCT - 30 * 24 * H
    g1 = make_gpu(node=node, gpu_class=h100, index=0, at=at)
    g2 = make_gpu(node=node, gpu_class=h100, index=1, at=at)
    g3 = make_gpu(node=node, gpu_class=h100, index=2, at=at)
    g5 = make_gpu(node=node, gpu_class=a100, index=3, at=at)
    d0, d1 = mig_device(g5, 4), mig_device(g5, 5)

    # R1 crosses both month edges; R2 is charged from its approval and released early.
    reserve(vision, g1, OCT - 2 * H, NOV + 2 * H)
    r2 = reserve(vision, g2, datetime(2026, 10, 10, tzinfo=UTC),
                 datetime(2026, 10, 12, tzinfo=UTC),
                 approved_at=datetime(2026, 10, 10, 2, tzinfo=UTC)).reservation
    reservation_release(reservation=r2, actor=admin, reason="done early",
                        now=datetime(2026, 10, 11, 6, tzinfo=UTC))

    _failure_and_reboot(time_machine, g1, issued.key)

    # On-demand H100 across the rate change inside the 12:00 hour, by a mapped user.
    time_machine.move_to(AFTER_SETTLEMENT, tick=False)
    start = RATE_CHANGE - 20 * M
    minute_samples(g3, start, 50, util=50)
    add_processes(g3, start, 50, user="alice", pid=7)
    # 7 s shared by alice's own process and a Slurm job of account robo (robotics, though
    # alice runs it): 3.5 s each.
    seven = datetime(2026, 10, 15, 14, 0, tzinfo=UTC)
    add_samples(g3, [{"start": seven, "seconds": 7, "util": 90}])
    _processes(g3, seven, 7, [("alice", None), ("alice", "robo")])
    # An unmapped user: unattributed, on nobody's statement.
    minute_samples(g3, datetime(2026, 10, 15, 16, tzinfo=UTC), 30, util=70)
    add_processes(g3, datetime(2026, 10, 15, 16, tzinfo=UTC), 30, user="mallory", pid=9)
    # MIG: device 0 busy 09:00–10:00 (alice), device 1 busy 09:30–10:00 (bob).
    mig_hour = datetime(2026, 10, 8, 9, tzinfo=UTC)
    minute_samples(d0, mig_hour, 60, util=40)
    add_processes(d0, mig_hour, 60, user="alice", pid=11)
    minute_samples(d1, mig_hour, 30, util=1)
    minute_samples(d1, mig_hour + 30 * M, 30, util=30)
    add_processes(d1, mig_hour + 30 * M, 30, user="bob", pid=12)

    while dirty_hours_process():
        pass
    return October(admin=admin, vision=vision, speech=speech, robotics=robotics, alice=alice,
                   vision_lead=vision_lead)
