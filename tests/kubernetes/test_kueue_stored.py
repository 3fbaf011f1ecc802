"""What each supported Kueue release keeps of what gpuquota writes: the fake API server stores
Kueue's objects as that release does (v1beta2 from 0.16, with flavorFungibility's `Borrow`
converted to `MayStopSearch`) and serves them back through v1beta1 with Kueue's conversion.
A second reconcile changes nothing on any of them."""

import pytest

from gpuquota.schedulers.models import Capabilities, Drift
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.kubernetes.conftest import NOW, TOKEN, shipped_roles, shipped_rules
from tests.kubernetes.fake_apiserver import FakeApiServer

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]
KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "ValidatingAdmissionPolicy",
         "ValidatingAdmissionPolicyBinding")
DIGEST = "registry.k8s.io/kueue/kueue@sha256:" + "ab" * 32


def served(release: str, *, image: str | None = None) -> FakeApiServer:
    return FakeApiServer(token=TOKEN, rbac_rules=shipped_rules(), rbac_roles=shipped_roles(),
                         kueue_image=image or f"registry.k8s.io/kueue/kueue:{release}",
                         kueue_release=release).start()


def stored(server: FakeApiServer) -> dict[tuple[str, str], dict]:
    return {(kind, f"{o['metadata']['name']}/{o['metadata'].get('namespace', '')}"): o
            for kind in KINDS for o in server.items(kind)}


@pytest.mark.parametrize(("release", "version", "borrow"), [
    ("v0.8.4", "v1beta1", "Borrow"),
    ("v0.9.1", "v1beta1", "Borrow"),
    ("v0.14.8", "v1beta1", "Borrow"),
    ("v0.15.4", "v1beta1", "MayStopSearch"),
    ("v0.16.1", "v1beta2", "MayStopSearch"),
    ("v0.19.2", "v1beta2", "MayStopSearch"),
])
def test_every_kind_reads_back_as_the_release_stores_it_and_the_second_run_writes_nothing(
        kube, release, version, borrow):
    server = served(release)
    try:
        kube.configure(server)
        gpus = kube.gpus["gpu-a"][:2]
        reservation = kube.reserve("vision", gpus)
        kube.lend(reservation, gpus[1])
        first = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        kept = stored(server)
        seen = len(server.requests)
        second = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        writes = [(r.method, r.path) for r in server.requests[seen:] if r.method != "GET"]
    finally:
        server.stop()
    assert first.outcome == "ok", first.error
    assert {kind for kind, _ in kept} == set(KINDS) and len(kept) == 24
    queue = kept[("ClusterQueue", "gq-vision/")]
    assert queue["apiVersion"] == f"kueue.x-k8s.io/{version}"
    assert queue["spec"]["flavorFungibility"]["whenCanBorrow"] == borrow
    cohort = "cohortName" if version == "v1beta2" else "cohort"
    assert queue["spec"][cohort] == "gq-kube"
    caps = Capabilities.objects.get(cluster=kube.cluster)
    assert caps.facts["kueue_storage_version"] == version
    assert (second.outcome, second.actions, second.drift, writes) == ("ok", [], 0, [])
    assert not Drift.objects.exists()


def test_an_unknown_release_that_stores_v1beta2_is_not_drift_either(kube):
    """The release cannot be read (a digest, no label): gpuquota writes the old name, which
    every release accepts, and takes the server's MayStopSearch for it."""
    server = served("v0.16.1", image=DIGEST)
    try:
        kube.configure(server)
        first = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        queue = server.get("ClusterQueue", "gq-vision")
        seen = len(server.requests)
        second = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        writes = [r for r in server.requests[seen:] if r.method != "GET"]
    finally:
        server.stop()
    assert first.outcome == "ok", first.error
    assert Capabilities.objects.get(cluster=kube.cluster).facts["kueue_release"] == ""
    assert queue["spec"]["flavorFungibility"]["whenCanBorrow"] == "MayStopSearch"
    assert (second.actions, writes) == ([], [])


def test_a_real_edit_of_a_converted_field_is_still_drift(kube):
    server = served("v0.16.1")
    try:
        kube.configure(server)
        cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        edited = server.get("ClusterQueue", "gq-vision")
        edited["spec"]["flavorFungibility"]["whenCanBorrow"] = "TryNextFlavor"
        server.put(edited)
        seen = len(server.requests)
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        patches = [r for r in server.requests[seen:] if r.method == "PATCH"]
        queue = server.get("ClusterQueue", "gq-vision")
    finally:
        server.stop()
    assert summary.drift == 1 and len(patches) == 1
    assert patches[0].body["spec"]["flavorFungibility"]["whenCanBorrow"] == "MayStopSearch"
    assert queue["spec"]["flavorFungibility"]["whenCanBorrow"] == "MayStopSearch"


def test_kueue_0_14_refuses_the_new_name_so_it_is_not_written_there(kube):
    """The fake's v1beta1 schema of 0.14 has no MayStopSearch, as Kueue's did not."""
    from tests.kubernetes.fake_apiserver.kueue_schemas import kueue_errors

    queue = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
             "metadata": {"name": "gq-x"},
             "spec": {"flavorFungibility": {"whenCanBorrow": "MayStopSearch"}}}
    assert any("whenCanBorrow" in e for e in kueue_errors(queue, release="v0.14.8"))
    assert kueue_errors(queue, release="v0.15.0") == []
