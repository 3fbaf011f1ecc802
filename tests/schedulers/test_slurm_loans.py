"""Lent GPUs as slurmctld shows them (`gpuquota.schedulers.slurm.loans`): an owner's job on
a lent GPU ends the loan as `owner_job` (times from slurmctld); a returned loan's borrower is
requeued (cancelled where it cannot be), and the GPU is freed when slurmctld no longer
shows a borrower on it; the samples never free a GPU the scheduler reports."""

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from gpuquota.core.models import AuditEntry
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm.loans import held_jobs_parse, slurm_loans_observe
from gpuquota.schedulers.slurm.options import SlurmOptions

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def _line(job_id, *, account, qos, state="RUNNING", idx="3", submit="09:59:50",
          start="10:00:02", requeue=1, node="node-a"):
    return (f"JobId={job_id} JobName=wrap UserId=daemon(1) GroupId=root(0) Account={account} "
            f"QOS={qos} JobState={state} Reason=None Requeue={requeue} Restarts=0 "
            f"SubmitTime=2026-12-07T{submit} StartTime=2026-12-07T{start} NodeList={node} "
            f"JOB_GRES=gpu:h100:1   Nodes={node} CPU_IDs=0 Mem=0 GRES=gpu:h100:1(IDX:{idx}) "
            "MinCPUsNode=1")


@dataclass
class FakeRunner:
    """Answers `scontrol -d -o show job` from `answers` (the last one repeats); records the
    other commands; refuses the requeue of the jobs in `refuse`."""

    answers: list[str]
    refuse: set = field(default_factory=set)
    ran: list = field(default_factory=list)

    def run(self, argv, **kwargs):
        if argv[:2] == ["scontrol", "-d"]:
            text = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            return SimpleNamespace(stdout=text)
        self.ran.append(" ".join(argv))
        if argv[:2] == ["scontrol", "requeue"] and argv[2] in self.refuse:
            raise BackendError("Requested operation is presently disabled")
        return SimpleNamespace(stdout="")


def _backend(runner, grace=0):
    return SimpleNamespace(runner=runner, options=SlurmOptions(loan_grace_s=grace))


@pytest.fixture
def lent(site):
    backend_config_update(cluster=site.cluster, actor=site.admin)
    r = site.reserve("vision", site.gpus["node-a"], start=T0 - timedelta(hours=2),
                     end=T0 + timedelta(hours=2))
    gpu = site.gpus["node-a"][3]
    loan = Loan.objects.create(assignment=r.assignments.get(gpu=gpu), gpu=gpu,
                               lent_from=T0 - timedelta(hours=1))
    return SimpleNamespace(site=site, loan=loan, gpu=gpu)


def test_held_jobs_parse_reads_times_requeue_and_gpus():
    jobs = held_jobs_parse("\n".join([
        _line("7", account="gq-lending", qos="gq-scavenger", requeue=0),
        _line("8", account="vision", qos="normal", state="PENDING"),
        # Preempted and cancelled (PreemptMode=CANCEL): final, holds nothing any more.
        "JobId=9 Account=gq-lending QOS=gq-scavenger JobState=PREEMPTED Requeue=0 "
        "NodeList=node-a JOB_GRES=gpu:h100:1",
    ]))
    assert [(j.job_id, j.borrower, j.requeue, j.gpus, j.submitted_at) for j in jobs] == [
        ("7", True, False, (("node-a", 3),), datetime(2026, 12, 7, 9, 59, 50, tzinfo=UTC))]


def test_the_owners_job_on_the_lent_gpu_ends_the_loan_as_owner_job(lent):
    """The site's own user (QOS normal) holds the lent GPU: the loan returns when the job
    was submitted, freed when it started (slurmctld's times), and can be lent again."""
    runner = FakeRunner([_line("12", account="vision", qos="normal")])
    seen = slurm_loans_observe(cluster=lent.site.cluster, backend=_backend(runner),
                               text=runner.answers[0], at=T0 + timedelta(seconds=30))
    loan = Loan.objects.get(pk=lent.loan.pk)
    assert seen.taken_back == 1 and loan.end_reason == "owner_job"
    assert (loan.returned_at, loan.freed_at) == (T0 - timedelta(seconds=10),
                                                  T0 + timedelta(seconds=2))
    assert runner.ran == []  # nothing to remove: Slurm's preemption did it
    # A borrower on the GPU is no owner; another team's job is none either.
    loan.delete()
    again = Loan.objects.create(assignment=lent.loan.assignment, gpu=lent.gpu,
                                lent_from=T0 - timedelta(minutes=5))
    text = "\n".join([_line("13", account="gq-lending", qos="gq-scavenger"),
                      _line("14", account="speech", qos="normal")])
    slurm_loans_observe(cluster=lent.site.cluster, backend=_backend(FakeRunner([text])),
                        text=text, at=T0)
    assert Loan.objects.get(pk=again.pk).returned_at is None


def test_return_now_requeues_the_borrower_and_frees_the_gpu_when_slurmctld_says(lent):
    lent.loan.returned_at, lent.loan.end_reason = T0, "owner_ask"
    lent.loan.save()
    borrower = _line("21", account="gq-lending", qos="gq-scavenger", start="09:30:00")
    # Requeued, the job is COMPLETING (its processes not gone: slurmctld no longer says
    # which GPU, yet it holds it) before it pends again.
    completing = "JobId=21 UserId=daemon(1) Account=gq-lending QOS=gq-scavenger " \
        "JobState=COMPLETING Requeue=1 NodeList=node-a JOB_GRES=gpu:h100:1"
    runner = FakeRunner([borrower, completing, completing, _line(
        "21", account="gq-lending", qos="gq-scavenger", state="PENDING")])
    seen = slurm_loans_observe(cluster=lent.site.cluster, backend=_backend(runner),
                               text=borrower, at=T0 + timedelta(seconds=1), settle_s=5)
    assert runner.ran == ["scontrol requeue 21"]
    assert (seen.requeued, seen.freed) == (1, 1) and len(runner.answers) == 1  # all read
    loan = Loan.objects.get(pk=lent.loan.pk)
    assert loan.freed_at is not None and loan.freed_at >= T0  # the poll's own clock
    entry = AuditEntry.objects.get(action="loan.borrower_requeued")
    assert entry.changes["job"] == "21" and entry.object_id == str(loan.pk)


def test_a_borrower_that_cannot_be_requeued_is_cancelled_and_one_still_there_after_the_notice(
        lent):
    lent.loan.returned_at, lent.loan.end_reason = T0, "assignment_end"
    lent.loan.save()
    stuck = _line("31", account="gq-lending", qos="gq-scavenger", start="09:30:00")
    cannot = _line("32", account="gq-lending", qos="gq-scavenger", idx="3", requeue=0)
    runner = FakeRunner([stuck])
    backend = _backend(runner, grace=60)
    slurm_loans_observe(cluster=lent.site.cluster, backend=backend, text=stuck,
                        at=T0 + timedelta(seconds=5), settle_s=0)
    slurm_loans_observe(cluster=lent.site.cluster, backend=backend, text=stuck,
                        at=T0 + timedelta(seconds=30), settle_s=0)  # within the notice
    slurm_loans_observe(cluster=lent.site.cluster, backend=backend, text=stuck + "\n" + cannot,
                        at=T0 + timedelta(seconds=181), settle_s=0)  # past notice + 120 s
    assert runner.ran == ["scontrol requeue 31", "scancel 31", "scancel 32"]
    reasons = list(AuditEntry.objects.filter(action="loan.borrower_cancelled").order_by(
        "id").values_list("reason", flat=True))
    assert reasons == ["still on the GPU after the notice",
                       "the job cannot be requeued (JobRequeue=0 or --no-requeue)"]
    # Requeue refused by the site (PreemptMode=CANCEL, JobRequeue=0): cancelled, said why.
    refusing = FakeRunner([_line("33", account="gq-lending", qos="gq-scavenger")],
                          refuse={"33"})
    slurm_loans_observe(cluster=lent.site.cluster, backend=_backend(refusing),
                        text=refusing.answers[0], at=T0 + timedelta(seconds=182), settle_s=0)
    assert refusing.ran == ["scontrol requeue 33", "scancel 33"]
    assert Loan.objects.get(pk=lent.loan.pk).freed_at is None  # slurmctld still shows them


def test_export_mode_observes_and_removes_nothing(lent):
    from gpuquota.schedulers.models import BackendConfig

    BackendConfig.objects.update(mode=BackendConfig.Mode.EXPORT)
    lent.loan.returned_at, lent.loan.end_reason = T0, "owner_ask"
    lent.loan.save()
    text = _line("41", account="gq-lending", qos="gq-scavenger")
    runner = FakeRunner([text])
    slurm_loans_observe(cluster=lent.site.cluster, backend=_backend(runner), text=text,
                        at=T0 + timedelta(seconds=5))
    assert runner.ran == [] and Loan.objects.get(pk=lent.loan.pk).freed_at is None
    slurm_loans_observe(cluster=lent.site.cluster, backend=_backend(runner), text="",
                        at=T0 + timedelta(seconds=9))
    assert Loan.objects.get(pk=lent.loan.pk).freed_at == T0 + timedelta(seconds=9)


def test_samples_never_free_a_gpu_on_a_cluster_whose_backend_observes(lent):
    """An idle sample after the return: on a cluster without a backend it frees the GPU; with
    the Slurm backend on, only slurmctld's report does (which shows the borrower)."""
    from gpuquota.lending.scan import lending_scan
    from tests.lending.factories import samples

    now = T0 + timedelta(minutes=30)
    loan = lent.loan
    loan.lent_from, loan.returned_at, loan.end_reason = (now - timedelta(minutes=30),
                                                         now - timedelta(minutes=5), "owner_ask")
    loan.save()
    samples(lent.gpu, start=now - timedelta(minutes=4), end=now - timedelta(minutes=3))
    lending_scan(now=now)
    assert Loan.objects.get(pk=loan.pk).freed_at is None
    from gpuquota.schedulers.models import BackendConfig

    BackendConfig.objects.update(mode=BackendConfig.Mode.OFF)
    lending_scan(now=now)
    assert Loan.objects.get(pk=loan.pk).freed_at == now - timedelta(minutes=5)


def test_the_cluster_page_gives_time_to_return_as_slurmctld_measured_it(lent):
    from django.test import Client

    # The page reads the last 7 days from now: a reservation of its own around now.
    now = timezone.now().replace(microsecond=0)
    r = lent.site.reserve("vision", lent.site.gpus["node-b"][:1], start=now - timedelta(hours=1),
                          end=now + timedelta(hours=1))
    Loan.objects.create(assignment=r.assignments.get(), gpu=lent.site.gpus["node-b"][0],
                        lent_from=now - timedelta(minutes=30), returned_at=now - timedelta(
                            minutes=5), end_reason="owner_ask",
                        freed_at=now - timedelta(minutes=5) + timedelta(seconds=7))
    client = Client()
    client.force_login(lent.site.admin)
    page = client.get(f"/schedulers/{lent.site.cluster.slug}/").content.decode()
    assert "Over the 1 returns of the last 7 days: p50 7 s, p95 7 s, p99 7 s, max 7 s " \
        "(returned by the reserving team: 1)" in page


@pytest.mark.parametrize("config, lends, note", [
    ({"preempt_type": "preempt/qos", "preempt_mode": "REQUEUE"}, True, None),
    ({"preempt_type": "preempt/partition_prio", "preempt_mode": "REQUEUE"}, False,
     "gpuquota does not lend this cluster's GPUs: PreemptType is preempt/partition_prio"),
    ({"preempt_type": "preempt/qos", "preempt_mode": "CANCEL", "job_requeue": "0"}, True,
     "Borrowers are cancelled, not requeued, when a lent GPU returns unless they submit "
     "with --requeue: JobRequeue=0 and PreemptMode=CANCEL"),
])
def test_a_site_whose_preemption_cannot_return_a_gpu_is_not_lent_and_told_why(
        lent, config, lends, note):
    """Site shape (c): the cluster page's notes say why, and lending's policy leaves the
    cluster's GPUs alone (a loan Slurm could not give back is no loan)."""
    from gpuquota.lending.selectors import assignments_lendable
    from gpuquota.schedulers.models import Capabilities
    from gpuquota.schedulers.slurm.capabilities import capabilities_report

    Loan.objects.all().delete()
    caps = capabilities_report({"version": "22.05.8", "enforce": "limits", **config},
                               {"node-a": ["h100"]})
    assert (note is None) == (not [n for n in caps.notes if "lend" in n or "requeue" in n])
    assert note is None or any(n.startswith(note) for n in caps.notes), caps.notes
    Capabilities.objects.create(cluster=lent.site.cluster, detected_at=T0,
                                facts=dict(caps.facts), notes=list(caps.notes))
    lendable = assignments_lendable(now=T0).filter(gpu=lent.gpu).exists()
    assert lendable == lends


def test_an_owners_job_known_only_from_accounting_ends_the_loan_too(lent):
    """A job shorter than the running jobs' observation: Slurm's accounting says the
    borrower was preempted and the owner's job started on the node."""
    from gpuquota.schedulers.models import SlurmJob
    from gpuquota.schedulers.slurm.jobs import loan_returns_record

    def job(job_id, **fields):
        return SlurmJob.objects.create(cluster=lent.site.cluster, job_id=job_id,
                                       nodes="node-a", gpu_tres="gres/gpu:h100=1", gpus=1,
                                       **fields)

    job("51", account="gq-lending", qos="gq-scavenger", state="PREEMPTED",
        submitted_at=T0 - timedelta(minutes=50), started_at=T0 - timedelta(minutes=50),
        ended_at=T0 - timedelta(seconds=1))
    job("52", account="vision", qos="normal", state="COMPLETED", team=lent.site.teams["vision"],
        submitted_at=T0 - timedelta(seconds=3), started_at=T0, ended_at=T0 + timedelta(seconds=9))
    assert len(loan_returns_record(cluster=lent.site.cluster)) == 1
    loan = Loan.objects.get(pk=lent.loan.pk)
    assert (loan.end_reason, loan.returned_at, loan.freed_at) == (
        "owner_job", T0 - timedelta(seconds=3), T0)
