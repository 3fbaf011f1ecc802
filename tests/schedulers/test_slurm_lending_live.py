"""The lending story on real Slurm daemons, in each site shape (deploy/slurm/dev-cluster
SHAPES): a GPU lent, a borrower runs on it, the owner's job (submitted as the team's users
submit today: no --qos) takes it back and the loan ends as `owner_job`; lent again, "return
now" removes the borrower and the GPU is freed as slurmctld says, within the notice.

(a) the project's own cluster; (b) a site's accounting (users with their own QOS list and
DefaultQOS=normal, team accounts under a site parent, a site QOS `scavenger`); (c) a site
whose PreemptMode is CANCEL and whose jobs are not requeueable: borrowers are cancelled,
not requeued, and the cluster page says so. One cluster for the session, reshaped by
`scontrol reconfigure`; given back bare in shape (a)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from gpuquota.core.models import AuditEntry
from gpuquota.lending.services import loan_lend, loan_return_by
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.models import Capabilities
from gpuquota.schedulers.slurm.running import running_gpus_import
from tests.schedulers.slurm_shapes import shape_b, shape_bare
from tests.schedulers.test_slurm_live import _site

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module", autouse=True)
def _given_back_bare(dev_slurm):
    yield
    dev_slurm.cluster.reshape("a")
    shape_bare(dev_slurm)


def _lend(r, gpu):
    loan = loan_lend(assignment=r.assignments.get(gpu=gpu), reason="test")  # reconciles
    return Loan.objects.get(pk=loan.pk)


@pytest.mark.parametrize("shape", ["a", "c", "b"])  # (c) keeps (a)'s accounts: no re-creation
def test_the_lending_story_in_each_site_shape(live, shape):
    if shape == "b":
        shape_b(live)
    elif shape == "a":
        shape_bare(live)
    live.cluster.reshape(shape)
    site = _site(live)
    now = timezone.now()
    r = site.reserve("vision", site.gpus["gqnode2"], start=now - timedelta(minutes=5),
                     end=now + timedelta(hours=1))
    lent_gpu = site.gpus["gqnode2"][3]
    loan = _lend(r, lent_gpu)
    assert "Accounts=gq-lending,vision" in live.run(
        "scontrol", "-o", "show", "reservation", f"gq-res-{r.pk}")
    requeue = shape != "c"
    caps = Capabilities.objects.get(cluster=site.cluster)
    assert any("Borrowers are cancelled, not requeued" in n for n in caps.notes) == (not requeue)

    # The owner's job, as the team's users submit today, takes the lent GPU back.
    owners = [live.sbatch(user="daemon", account="vision") for _ in range(3)]
    for job in owners:
        assert live.wait_state(job, {"RUNNING"})["NodeList"] == "gqnode2"
    borrower = live.sbatch(user="nobody", account="gq-lending", srun=True)
    assert live.wait_state(borrower, {"RUNNING"})["NodeList"] == "gqnode2"
    running_gpus_import(cluster=site.cluster)
    assert Loan.objects.get(pk=loan.pk).returned_at is None  # a borrower is no owner
    owner = live.sbatch(user="daemon", account="vision")
    started = live.wait_state(owner, {"RUNNING"}, timeout_s=60)
    assert started["JobState"] == "RUNNING" and started["QOS"] == (
        "normal" if shape == "b" else "gq-owner")
    after = live.job(borrower)
    assert (after["JobState"], after["Restarts"]) == (
        ("PENDING", "1") if requeue else ("PREEMPTED", "0")), after
    running_gpus_import(cluster=site.cluster)  # the product's own observation
    loan.refresh_from_db()
    assert loan.end_reason == "owner_job" and loan.freed_at is not None
    assert 0 <= (loan.freed_at - loan.returned_at).total_seconds() <= 30
    assert (loan.returned_at, loan.freed_at) == (
        _instant(started["SubmitTime"]), _instant(started["StartTime"]))

    # Lent again (no 409), a borrower on it, "return now": removed and freed in the notice.
    live.run("scancel", owner)
    live.wait_state(owner, {"COMPLETED", "CANCELLED"})
    live.run("scancel", borrower)
    again = _lend(r, lent_gpu)
    borrower = live.sbatch(user="nobody", account="gq-lending", srun=True)
    assert live.wait_state(borrower, {"RUNNING"})["NodeList"] == "gqnode2"
    running_gpus_import(cluster=site.cluster)
    lead = site.teams["vision"].memberships.get().user
    loan_return_by(loan=again, actor=lead, is_owner_lead=True)  # reconciles, removes, frees
    again.refresh_from_db()
    assert again.end_reason == "owner_ask" and again.freed_at is not None, again
    assert (again.freed_at - again.returned_at).total_seconds() <= 5 + 10  # KillWait=5
    gone = live.job(borrower)
    assert gone["JobState"] in (("PENDING",) if requeue else ("CANCELLED",)), gone
    action = "loan.borrower_requeued" if requeue else "loan.borrower_cancelled"
    assert AuditEntry.objects.filter(action=action, object_id=str(again.pk)).exists()


def _instant(value: str):
    from datetime import UTC, datetime

    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
