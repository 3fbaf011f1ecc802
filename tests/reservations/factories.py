"""Test data for reservations: a small fleet, teams with leads and quotas."""

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from accounts.models import Membership, Team, User
from gpuquota.inventory.models import Gpu, GpuClass, Node
from gpuquota.inventory.services import gpu_register
from tests.factories import (
    AdminFactory,
    GpuClassFactory,
    MembershipFactory,
    NodeFactory,
    QuotaFactory,
    TeamFactory,
    UserFactory,
    make_gpu,
)

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def lead_of(team: Team, username: str | None = None) -> User:
    user = UserFactory(username=username or f"{team.slug}-lead")
    MembershipFactory(user=user, team=team, role=Membership.Role.LEAD)
    return user


def mig_of(parent: Gpu) -> Gpu:
    return gpu_register(node=parent.node, uuid="MIG-" + str(uuid.uuid4()),
                        model_name=parent.model_name, at=parent.commissioned_at, parent=parent)


@dataclass
class Fleet:
    """Nodes of one class (`sizes` GPUs each), two teams with leads and quotas."""

    gpu_class: GpuClass
    nodes: list[Node]
    gpus: list[Gpu]
    vision: Team
    speech: Team
    vision_lead: User
    speech_lead: User
    admin: User
    extra: dict = field(default_factory=dict)

    @classmethod
    def create(cls, *, sizes=(4, 4), vision_quota=4, speech_quota=2,
               class_name="H100-80GB") -> "Fleet":
        gpu_class = GpuClassFactory(name=class_name)
        nodes, gpus = [], []
        for n, size in enumerate(sizes):
            node = NodeFactory(hostname=f"{class_name.lower()}-node-{n:02d}")
            nodes.append(node)
            gpus += [make_gpu(node=node, gpu_class=gpu_class, index=i) for i in range(size)]
        vision = TeamFactory(name="Vision", slug="vision")
        speech = TeamFactory(name="Speech", slug="speech")
        if vision_quota:
            QuotaFactory(team=vision, gpu_class=gpu_class, gpus=vision_quota)
        if speech_quota:
            QuotaFactory(team=speech, gpu_class=gpu_class, gpus=speech_quota)
        return cls(gpu_class=gpu_class, nodes=nodes, gpus=gpus, vision=vision, speech=speech,
                   vision_lead=lead_of(vision), speech_lead=lead_of(speech),
                   admin=AdminFactory(username="root"))

    def request(self, *, team=None, count=1, start=None, end=None, by=None, now=NOW, **kwargs):
        """A reservation request by the team's lead, by default 1 GPU for [NOW+1h, NOW+3h)."""
        from gpuquota.reservations.services import reservation_create

        team = team or self.vision
        by = by or (self.vision_lead if team == self.vision else self.speech_lead)
        return reservation_create(
            team=team, gpu_class=self.gpu_class, count=count,
            start=start or NOW + timedelta(hours=1), end=end or NOW + timedelta(hours=3),
            requested_by=by, now=now, **kwargs,
        )
