"""Foreign use: another team's pod on a reserved GPU outside a loan, from the agents'
process records; on the cluster page (admins), the team page and the admin's home page."""

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from accounts.models import Membership
from gpuquota.ingest.models import ProcessRecord
from gpuquota.schedulers.kubernetes.foreign import foreign_uses
from gpuquota.schedulers.models import ReservationBinding
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.factories import MembershipFactory, UserFactory
from tests.kubernetes.conftest import NOW
from tests.kubernetes.fake_apiserver.__main__ import run

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]


def seen(gpu, namespace, pod, minutes, *, pid=7):
    for minute in minutes:
        start = NOW + timedelta(minutes=minute)
        ProcessRecord.objects.create(
            gpu=gpu, window_start=start, window_end=start + timedelta(minutes=1), pid=pid,
            pid_start=1, job_source=ProcessRecord.JobSource.KUBERNETES, job_account=namespace,
            job_id=pod, received_at=start)


def test_another_teams_pod_on_a_reserved_gpu_is_foreign_unless_lent(kube):
    gpus = kube.gpus["gpu-a"]
    reservation = kube.reserve("vision", gpus[:2])
    seen(gpus[0], "vision-dev", "train-0", range(3))  # the owner's own namespace
    seen(gpus[0], "speech", "asr-7", range(5, 9))  # another team's
    seen(gpus[1], "research", "notebook-1", [1], pid=8)  # a namespace of no team
    seen(gpus[2], "speech", "asr-8", [1])  # not reserved: not foreign
    kube.lend(reservation, gpus[1], at=NOW + timedelta(minutes=30))
    seen(gpus[1], "speech", "asr-9", [31, 32])  # on loan: borrowing is allowed

    uses = foreign_uses(cluster=kube.cluster, start=NOW, end=NOW + timedelta(hours=1))
    assert [(u.gpus, u.account, u.using_team, u.job, u.seen_s) for u in uses] == [
        ((gpus[1].uuid,), "research", "", "notebook-1", 60),
        ((gpus[0].uuid,), "speech", "speech", "asr-7", 4 * 60),
    ]
    asr = uses[1]
    assert (asr.first_seen, asr.last_seen) == (NOW + timedelta(minutes=5),
                                              NOW + timedelta(minutes=9))
    assert asr.reservation.pk == reservation.pk and asr.reserving_team == "vision"
    assert "(4 windows)" in asr.evidence  # four one-minute windows
    assert foreign_uses(cluster=kube.cluster, start=NOW, end=NOW + timedelta(hours=1),
                        team=kube.teams["speech"]) == []


def test_the_cluster_page_shows_bindings_objects_and_foreign_use_to_admins_only(kube,
                                                                                 apiserver):
    kube.configure(apiserver)
    reservation = kube.reserve("vision", kube.gpus["gpu-a"][:2])
    cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    seen(kube.gpus["gpu-a"][0], "speech", "asr-7", [5])
    url = reverse("kubernetes_cluster", args=["kube"]) + f"?month={NOW:%Y-%m}"

    member = Client()
    member.force_login(UserFactory())
    assert member.get(url).status_code in (403, 404)
    admin = Client()
    admin.force_login(kube.admin)
    page = admin.get(url)
    html = page.content.decode()
    assert page.status_code == 200
    row = html.split(f'id="reservation-{reservation.pk}"')[1].split("</tr>")[0]
    assert "Quota" in row and "ClusterQueue gq-vision" in row
    assert "LocalQueue gq-vision/vision-dev" in row
    assert "v1.34.2" in html and "kueue.x-k8s.io/v1beta1" in html
    assert "Foreign use in December 2026: 1" in html and "asr-7" in html
    assert ">Seen for</th>" in html and ">1 min</td>" in html  # a length, not "Windows 1"
    assert admin.get(reverse("kubernetes_cluster", args=["kube"]) + "?month=nope"
                     ).status_code == 200


def test_the_team_and_the_admins_are_told(kube):
    kube.reserve("vision", kube.gpus["gpu-a"][:1])
    seen(kube.gpus["gpu-a"][0], "speech", "asr-7", [5])
    lead = UserFactory()
    MembershipFactory(user=lead, team=kube.teams["vision"])
    client = Client()
    client.force_login(lead)
    with time_machine.travel(NOW + timedelta(hours=1), tick=False):
        team_page = client.get(reverse("team_detail", args=["vision"])).content.decode()
        other = Client()
        other.force_login(kube.admin)
        home = other.get("/").content.decode()
    assert 'id="foreign-use"' in team_page and "asr-7" in team_page
    assert "Foreign GPU use this month" in home and "kube: 1" in home


def test_the_fake_api_server_script_configures_a_cluster_and_reconciles_it(kube):
    kube.reserve("vision", kube.gpus["gpu-a"][:2])
    out = StringIO()
    with time_machine.travel(NOW, tick=False):
        run(["--cluster", "kube", "--once"], out)
    text = out.getvalue()
    assert "kube: ok, 24 write(s)" in text
    assert "POST /apis/kueue.x-k8s.io/v1beta1/clusterqueues" in text
    assert kube.cluster.backend_config.api_url.startswith("http://127.0.0.1:")
    binding = ReservationBinding.objects.get()
    assert binding.level == "quota"


def test_the_team_page_shows_how_its_reservations_are_held(kube, apiserver):
    kube.configure(apiserver, exact_gpus=False)
    reservation = kube.reserve("vision", kube.gpus["gpu-a"][:2])
    cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
    lead = UserFactory()
    MembershipFactory(user=lead, team=kube.teams["vision"], role=Membership.Role.LEAD)
    client = Client()
    client.force_login(lead)
    with time_machine.travel(NOW, tick=False):
        page = client.get(reverse("team_detail", args=["vision"])).content.decode()
    section = page.split('id="scheduler-holds"')[1]
    assert f"#{reservation.pk}" in section and "Quota" in section
    assert "kueue.x-k8s.io/queue-name: gq-vision" in section
