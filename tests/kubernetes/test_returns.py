"""Loan returns seen on the cluster: the first reclamation preemption after the return was
asked frees the loan; its time-to-return is audited. Read from the fake API server's
Workloads with the shipped ClusterRole."""

from datetime import timedelta

import pytest

from gpuquota.core.models import AuditEntry
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.kubernetes.returns import clusters_returns_observe
from tests.kubernetes.conftest import NOW
from tests.kubernetes.fake_apiserver.kueue_schemas import kueue_errors

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]


def workload(name, *, at, reason):
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": name, "namespace": "speech"},
            "spec": {"queueName": "gq-speech", "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
            "status": {"conditions": [
                {"type": "Evicted", "status": "True", "reason": "Preempted",
                 "lastTransitionTime": f"{at:%Y-%m-%dT%H:%M:%SZ}"},
                {"type": "Preempted", "status": "True", "reason": reason,
                 "message": "Preempted to accommodate a workload",
                 "lastTransitionTime": f"{at:%Y-%m-%dT%H:%M:%SZ}"}]}}


def test_a_reclamation_preemption_frees_the_returned_loan_once(kube, apiserver):
    kube.configure(apiserver)
    gpus = kube.gpus["gpu-a"][:2]
    reservation = kube.reserve("vision", gpus)
    loan = kube.lend(reservation, gpus[1], at=NOW - timedelta(minutes=30))
    Loan.objects.filter(pk=loan.pk).update(returned_at=NOW, end_reason="owner_job")
    for obj in (workload("early", at=NOW - timedelta(minutes=5), reason="InCohortReclamation"),
                workload("own-queue", at=NOW + timedelta(minutes=1), reason="InClusterQueue"),
                workload("borrower", at=NOW + timedelta(seconds=95),
                         reason="InCohortReclamation")):
        assert kueue_errors(obj) == []
        apiserver.put(obj)

    assert clusters_returns_observe() == {"kube": 1}
    loan.refresh_from_db()
    assert loan.freed_at == NOW + timedelta(seconds=95)
    entry = AuditEntry.objects.get(action="loan.freed")
    assert entry.changes["time_to_return_s"] == 95
    assert entry.changes["preempted_workload"] == "speech/borrower"
    assert ("GET", "/apis/kueue.x-k8s.io/v1beta1/workloads") in {
        (r.method, r.path) for r in apiserver.requests}

    assert clusters_returns_observe() == {"kube": 0}  # idempotent
    assert AuditEntry.objects.filter(action="loan.freed").count() == 1
