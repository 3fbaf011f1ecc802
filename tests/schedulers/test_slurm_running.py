"""Which GPUs running Slurm jobs hold: `scontrol -d -o show job` parsed (real 22.05 lines),
recorded per job, node and index, and used as the evidence of foreign use, whatever the
reservation's binding level."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from gpuquota.core.timeutil import Period
from gpuquota.schedulers.models import ReservationBinding, SlurmJob, SlurmJobGpu
from gpuquota.schedulers.selectors import foreign_use
from gpuquota.schedulers.slurm.objects import RunningGpu, gres_indices, running_gpus_parse
from gpuquota.schedulers.slurm.running import running_gpus_record

# Slurm 22.05.8's answers (the dev cluster), cut to the fields that matter.
ONE_NODE = (
    "JobId=1 JobName=wrap UserId=daemon(1) GroupId=root(0) Account=vision QOS=normal "
    "JobState=RUNNING Reason=None NodeList=gqnode1 BatchHost=gqnode1 NumNodes=1 NumCPUs=1 "
    "TRES=cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:h100=2 JOB_GRES=gpu:h100:2   "
    "Nodes=gqnode1 CPU_IDs=0 Mem=0 GRES=gpu:h100:2(IDX:0-1) MinCPUsNode=1 WorkDir=/tmp"
)
TWO_NODES = (
    "JobId=3 JobName=wrap UserId=daemon(1) GroupId=root(0) Account=vision QOS=normal "
    "JobState=RUNNING Reason=None NodeList=gqnode[1-2] NumNodes=2 JOB_GRES=gpu:h100:2   "
    "Nodes=gqnode1 CPU_IDs=1 Mem=0 GRES=gpu:h100:1(IDX:2)   "
    "Nodes=gqnode2 CPU_IDs=0 Mem=0 GRES=gpu:h100:1(IDX:0) MinCPUs=1"
)
SAME_ON_BOTH = (
    "JobId=4 UserId=nobody(65534) Account=speech QOS=normal JobState=RUNNING NumNodes=2 "
    "Nodes=gqnode[1-2] CPU_IDs=0 Mem=0 GRES=gpu:h100:1(IDX:3) MinCPUs=1"
)
PENDING = ("JobId=2 UserId=daemon(1) Account=vision JobState=PENDING Reason=Resources "
           "NumNodes=2-2 TRES=cpu=2,gres/gpu:h100=6 MinCPUsNode=1")


@pytest.mark.parametrize("text, indices", [
    ("gpu:h100:2(IDX:0-1)", (0, 1)),
    ("gpu:2(IDX:0,2-3)", (0, 2, 3)),
    ("gpu:a100_3g.20gb:1(IDX:5)", (5,)),
    ("gpu:h100:1(IDX:2),shard:h100:4(2/4,0/4)", (2,)),
    ("gpu:h100:0(IDX:N/A)", ()),
    ("(null)", ()),
])
def test_gres_indices(text, indices):
    assert gres_indices(text) == indices


def test_running_jobs_give_their_gpus_per_node_and_pending_jobs_none():
    text = "\n".join([ONE_NODE, TWO_NODES, SAME_ON_BOTH, PENDING])
    assert running_gpus_parse(text) == [
        RunningGpu("1", "vision", "daemon", "gqnode1", 0),
        RunningGpu("1", "vision", "daemon", "gqnode1", 1),
        RunningGpu("3", "vision", "daemon", "gqnode1", 2),
        RunningGpu("3", "vision", "daemon", "gqnode2", 0),
        RunningGpu("4", "speech", "nobody", "gqnode1", 3),
        RunningGpu("4", "speech", "nobody", "gqnode2", 3),
    ]
    assert running_gpus_parse("No jobs in the system\n") == []


def test_observations_extend_the_rows_and_tie_them_to_the_inventory(site):
    now = timezone.now().replace(microsecond=0)
    gpus = running_gpus_parse(ONE_NODE.replace("gqnode1", "node-a"))
    running_gpus_record(cluster=site.cluster, gpus=gpus, at=now - timedelta(minutes=2),
                        node_name=lambda h: h)
    running_gpus_record(cluster=site.cluster, gpus=gpus[:1], at=now, node_name=lambda h: h)
    rows = {r.gpu_index: r for r in SlurmJobGpu.objects.filter(job_id="1")}
    assert rows[0].gpu == site.gpus["node-a"][0] and rows[1].gpu == site.gpus["node-a"][1]
    assert (rows[0].first_seen_at, rows[0].last_seen_at) == (now - timedelta(minutes=2), now)
    assert rows[1].last_seen_at == now - timedelta(minutes=2)  # not seen the second time
    # A node the inventory does not know: recorded, tied to no GPU.
    running_gpus_record(cluster=site.cluster, gpus=[RunningGpu("9", "x", "y", "elsewhere", 0)],
                        at=now, node_name=lambda h: h)
    assert SlurmJobGpu.objects.get(job_id="9").gpu is None


@pytest.mark.django_db(transaction=True)
def test_the_database_refuses_a_last_sighting_before_the_first(site):
    now = timezone.now()
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            "INSERT INTO schedulers_slurmjobgpu (cluster_id, job_id, node, gpu_index, account, "
            "\"user\", first_seen_at, last_seen_at) VALUES (%s, '1', 'n', 0, '', '', %s, %s)",
            [site.cluster.pk, now, now - timedelta(seconds=1)])


def test_foreign_use_by_gpu_on_a_reservation_held_by_quota_only(site):
    """Two of node-a's four GPUs reserved: Slurm holds them by the account's limit only, so
    another account's job may land on them. The GPUs slurmctld named are the evidence; a job
    of another account on node-a's other GPUs is not foreign use."""
    now = timezone.now().replace(microsecond=0)
    r = site.reserve("vision", site.gpus["node-a"][:2], start=now - timedelta(hours=2),
                     end=now + timedelta(hours=2))
    ReservationBinding.objects.create(reservation=r, level="quota", why="shares node-a",
                                      updated_at=r.start)
    for job_id, index in (("201", 1), ("202", 3)):
        SlurmJob.objects.create(
            cluster=site.cluster, job_id=job_id, submitted_at=now - timedelta(hours=1),
            started_at=now - timedelta(hours=1), state="RUNNING", account="speech", user="bob",
            qos="normal", nodes="node-a", gpu_tres="gres/gpu:h100=1", gpus=1)
        running_gpus_record(cluster=site.cluster, at=now - timedelta(minutes=30),
                            gpus=[RunningGpu(job_id, "speech", "bob", "node-a", index)],
                            node_name=lambda h: h)
    found = foreign_use(period=Period(now - timedelta(days=30), now + timedelta(days=1)))
    assert [(f.job, f.gpus) for f in found] == [("201", ("node-a:1",))]


def test_on_a_whole_node_a_job_seen_elsewhere_is_not_flagged_by_its_node_list(site):
    """Node-a reserved whole; a two-node job of another account that slurmctld was seen
    running on node-b's GPUs only: its node list alone would flag it, the GPUs it held
    clear it."""
    now = timezone.now().replace(microsecond=0)
    r = site.reserve("vision", site.gpus["node-a"], start=now - timedelta(hours=2),
                     end=now + timedelta(hours=2))
    ReservationBinding.objects.create(reservation=r, level="whole_nodes", why="node-a whole",
                                      updated_at=r.start)
    for job_id in ("301", "302"):
        SlurmJob.objects.create(
            cluster=site.cluster, job_id=job_id, submitted_at=now - timedelta(hours=1),
            started_at=now - timedelta(hours=1), state="RUNNING", account="speech", user="bob",
            qos="normal", nodes="node-a,node-b", gpu_tres="gres/gpu:h100=2", gpus=2)
    running_gpus_record(cluster=site.cluster, at=now - timedelta(minutes=30),
                        gpus=[RunningGpu("301", "speech", "bob", "node-b", 0)],
                        node_name=lambda h: h)
    # 302 was never seen running (too short): its node list is the evidence.
    found = foreign_use(period=Period(now - timedelta(days=30), now + timedelta(days=1)))
    assert [(f.job, f.nodes, f.gpus) for f in found] == [("302", ("node-a",), ())]


def test_the_team_page_lists_the_jobs_seen_on_a_reservations_gpus(site):
    from django.test import Client
    from django.urls import reverse

    from accounts.models import User

    now = timezone.now().replace(microsecond=0)
    r = site.reserve("vision", site.gpus["node-a"][:2], start=now - timedelta(hours=2),
                     end=now + timedelta(hours=2))
    ReservationBinding.objects.create(reservation=r, level="quota", why="shares node-a",
                                      updated_at=r.start)
    SlurmJob.objects.create(
        cluster=site.cluster, job_id="401", submitted_at=now - timedelta(hours=1),
        started_at=now - timedelta(hours=1), state="RUNNING", account="vision", user="alice",
        qos="normal", nodes="node-a", gpu_tres="gres/gpu:h100=2", gpus=2)
    running_gpus_record(cluster=site.cluster, at=now - timedelta(minutes=30), gpus=[
        RunningGpu("401", "vision", "alice", "node-a", 0),
        RunningGpu("401", "vision", "alice", "node-a", 1)], node_name=lambda h: h)
    client = Client()
    client.force_login(User.objects.get(username="alice"))
    page = client.get(
        reverse("team_detail", args=["vision"])).content.decode()
    assert "Jobs on this reservation" in page and "node-a:0, node-a:1" in page


def test_a_return_is_the_lent_gpus_whose_borrower_slurmctld_saw_there(site):
    """Two GPUs of node-a lent; the owner's job preempted the borrower running on GPU 3.
    Without the GPUs a job held, each loan on the node would take that return (the node is
    all Slurm's accounting says); with them, only GPU 3's loan does."""
    from gpuquota.reservations.models import Loan
    from gpuquota.schedulers.models import LoanReturn
    from gpuquota.schedulers.services import backend_config_update
    from gpuquota.schedulers.slurm.jobs import loan_returns_record

    backend_config_update(cluster=site.cluster, actor=site.admin)
    now = timezone.now().replace(microsecond=0)
    r = site.reserve("vision", site.gpus["node-a"], start=now - timedelta(hours=2),
                     end=now + timedelta(hours=2))
    loans = {g.index: Loan.objects.create(assignment=r.assignments.get(gpu=g), gpu=g,
                                          lent_from=now - timedelta(hours=1))
             for g in site.gpus["node-a"][2:]}

    def job(job_id, **fields):
        return SlurmJob.objects.create(cluster=site.cluster, job_id=job_id, nodes="node-a",
                                       gpu_tres="gres/gpu:h100=1", gpus=1, **fields)

    job("501", account="gq-lending", qos="gq-scavenger", state="PREEMPTED",
        submitted_at=now - timedelta(minutes=50), started_at=now - timedelta(minutes=50),
        ended_at=now - timedelta(minutes=10))
    job("502", account="vision", qos="gq-owner", state="RUNNING", team=site.teams["vision"],
        submitted_at=now - timedelta(minutes=10, seconds=2),
        started_at=now - timedelta(minutes=10))
    running_gpus_record(cluster=site.cluster, at=now - timedelta(minutes=30),
                        gpus=[RunningGpu("501", "gq-lending", "nobody", "node-a", 3)],
                        node_name=lambda h: h)
    returns = loan_returns_record(cluster=site.cluster)
    assert [(x.loan_id, x.borrower_job_id, x.owner_job_id, x.time_to_return_s)
            for x in returns] == [(loans[3].pk, "501", "502", 2)]
    assert not LoanReturn.objects.filter(loan=loans[2]).exists()
    from django.test import Client

    client = Client()
    client.force_login(site.admin)
    page = client.get(f"/schedulers/{site.cluster.slug}/").content.decode()
    # The open loan was ended by the owner's job (submitted -> started, as Slurm says).
    assert 'id="returns"' in page and "p50 2 s, p95 2 s, p99 2 s, max 2 s" in page
    assert "node-a GPU 3" in page and ">501<" in page and ">502<" in page
