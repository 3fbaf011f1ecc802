"""Loans in the exact-GPU (DRA) mode, against the fake API server playing the scheduler's
allocator and the device taint eviction controller: a lent GPU leaves its team's claim and
taint so another team's claim is given it; when the loan ends the NoExecute taint comes back,
the borrower's pod is evicted, and the loan is freed when the API server shows no other
team's claim on the GPU, the time-to-return measured from those claims."""

from datetime import timedelta

import pytest
import time_machine

from gpuquota.core.models import AuditEntry
from gpuquota.lending.conf import lend_return_notice_s
from gpuquota.reservations.models import Loan
from gpuquota.schedulers.kubernetes.returns import clusters_returns_observe
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.kubernetes.conftest import NOW, dra_server, gpu_slice
from tests.kubernetes.fake_apiserver import dra

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]
RETURNED = NOW + timedelta(hours=1)


def claim(namespace: str, name: str, spec: dict) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def borrower(server, *, grace_s: int = 30) -> None:
    """speech's pod asking for any one GPU of the driver's class (no toleration)."""
    server.put(claim("speech", "train-gpu", {"devices": {"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]}}))
    server.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train",
                                                              "namespace": "speech"},
                "spec": {"terminationGracePeriodSeconds": grace_s, "containers": [
                    {"name": "main", "image": "train:1"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "train-gpu"}]}})


def devices(server, namespace: str, name: str) -> list[str]:
    found = server.get("ResourceClaim", name, namespace)
    results = ((found.get("status") or {}).get("allocation") or {}).get("devices", {})
    return sorted(r["device"] for r in results.get("results", []))


def reconcile(kube, at):
    with time_machine.travel(at, tick=False):
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=at)
    assert summary.outcome == "ok", summary.error
    return summary


def test_a_lent_gpu_is_claimable_by_borrowers_and_comes_back_within_the_notice(kube):
    gpus = kube.gpus["gpu-a"]
    server = dra_server(version="v1.37.0", slices=[gpu_slice("gpu-a", gpus)])
    try:
        kube.configure(server, exact_gpus=True)
        reservation = kube.reserve("vision", gpus, end=NOW + timedelta(hours=4))
        template = f"gq-res-{reservation.pk}"
        reconcile(kube, NOW)
        borrower(server)
        assert not dra.allocate(server, "speech", "train-gpu", pod="train")  # all reserved

        loan = kube.lend(reservation, gpus[1], at=NOW)
        reconcile(kube, NOW + timedelta(minutes=1))
        assert server.get("DeviceTaintRule", f"{template}-gpu-a-gpu1") is None
        spec = server.get("ResourceClaimTemplate", template, "vision")["spec"]["spec"]
        request = spec["devices"]["requests"][0]["exactly"]
        assert request["count"] == 3 and gpus[1].uuid not in request["selectors"][0]["cel"][
            "expression"]
        assert dra.allocate(server, "speech", "train-gpu", pod="train")
        assert devices(server, "speech", "train-gpu") == ["gpu-1"]
        server.put(claim("vision", "owner", spec))  # the team's own claim from its template
        assert dra.allocate(server, "vision", "owner", pod="owner")
        assert devices(server, "vision", "owner") == ["gpu-0", "gpu-2", "gpu-3"]

        Loan.objects.filter(pk=loan.pk).update(returned_at=RETURNED, end_reason="owner_ask")
        reconcile(kube, RETURNED)
        rule = server.get("DeviceTaintRule", f"{template}-gpu-a-gpu1")
        assert rule["spec"]["taint"] == {"key": "gpuquota.io/reserved", "value": "vision",
                                         "effect": "NoExecute"}
        evicted = server.get("Pod", "train", "speech")
        assert evicted["status"]["conditions"][-1]["reason"] == "DeletionByDeviceTaintManager"
        with time_machine.travel(RETURNED + timedelta(seconds=10), tick=False):
            assert clusters_returns_observe() == {"kube": 0}  # the pod is still stopping
        with time_machine.travel(RETURNED + timedelta(seconds=35), tick=False):
            assert clusters_returns_observe() == {"kube": 1}
            assert clusters_returns_observe() == {"kube": 0}  # idempotent
        reads = {(r.method, r.path) for r in server.requests}
    finally:
        server.stop()
    loan.refresh_from_db()
    assert loan.freed_at == RETURNED + timedelta(seconds=35)
    entry = AuditEntry.objects.get(action="loan.freed")
    assert entry.changes["time_to_return_s"] == 35 <= lend_return_notice_s()
    assert entry.changes["device"] == "gpu.nvidia.com/gpu-a/gpu-1"
    assert ("GET", "/apis/resource.k8s.io/v1/resourceclaims") in reads
    assert server.get("Pod", "train", "speech") is None
    assert devices(server, "speech", "train-gpu") == []


def test_a_borrower_that_stays_on_the_gpu_is_never_called_freed(kube):
    """The API server still shows the other team's claim on the GPU: no freed_at, whatever
    our samples say; the lending app reports the loan past its notice."""
    gpus = kube.gpus["gpu-a"][:2]
    server = dra_server(version="v1.37.0", slices=[gpu_slice("gpu-a", gpus)])
    try:
        kube.configure(server, exact_gpus=True)
        reservation = kube.reserve("vision", gpus, end=NOW + timedelta(hours=4))
        loan = kube.lend(reservation, gpus[0], at=NOW)
        reconcile(kube, NOW)
        borrower(server, grace_s=3600)
        assert dra.allocate(server, "speech", "train-gpu", pod="train")
        Loan.objects.filter(pk=loan.pk).update(returned_at=RETURNED, end_reason="owner_ask")
        reconcile(kube, RETURNED)
        with time_machine.travel(RETURNED + timedelta(minutes=10), tick=False):
            assert clusters_returns_observe() == {"kube": 0}
    finally:
        server.stop()
    loan.refresh_from_db()
    assert loan.freed_at is None


def _held_by_speech(gpus) -> list[dict]:
    """speech's claims, each allocated one of `gpus` (as the allocator leaves them)."""
    return [{**claim("speech", f"train-{g.index}", {}), "status": {"allocation": {"devices": {
        "results": [{"driver": "gpu.nvidia.com", "pool": "gpu-a",
                     "device": f"gpu-{g.index}"}]}}}} for g in gpus]


def test_loans_still_held_cost_the_same_queries_however_many(kube):
    """Issue 34: the reserving team's namespaces were read once per returned loan, every
    pass, for as long as a borrower held the GPU; now once for all the loans."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from gpuquota.schedulers.kubernetes.returns import dra_loans_freed

    gpus = kube.gpus["gpu-a"]
    reservation = kube.reserve("vision", gpus, end=NOW + timedelta(hours=4))
    queries = []
    for lent in (gpus[:1], gpus):
        for gpu in lent:
            if not Loan.objects.filter(gpu=gpu).exists():
                kube.lend(reservation, gpu, at=NOW)
        Loan.objects.update(returned_at=RETURNED, end_reason="owner_ask")
        with CaptureQueriesContext(connection) as seen:
            freed = dra_loans_freed(cluster=kube.cluster, claims=_held_by_speech(lent),
                                    driver="gpu.nvidia.com", at=RETURNED + timedelta(minutes=1))
        assert freed == 0  # speech still holds every returned GPU
        queries.append(len(seen))
    assert queries[0] == queries[1], queries
    # vision's own claim on a GPU does not hold its loan: that one is freed.
    own = [{**c, "metadata": {**c["metadata"], "namespace": "vision-dev"}}
           for c in _held_by_speech(gpus[:1])]
    assert dra_loans_freed(cluster=kube.cluster, claims=own + _held_by_speech(gpus[1:]),
                           driver="gpu.nvidia.com", at=RETURNED + timedelta(minutes=2)) == 1
    assert Loan.objects.get(gpu=gpus[0]).freed_at == RETURNED + timedelta(minutes=2)
