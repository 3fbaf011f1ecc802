"""The exact-GPU (DRA) mode on each Kubernetes release, against the fake API server serving
what that release serves (kubernetes-validate's schemas): claim templates pinned to the
reserved GPUs' UUIDs everywhere from 1.34, DeviceTaintRules in the version the release serves
them (v1alpha3 only where the alpha API is turned on, v1beta2 in 1.36, v1 from 1.37), and
where none is served, the cluster page and each binding say what the mode cannot do."""

import pytest
from django.test import Client
from django.urls import reverse

from gpuquota.schedulers.models import Capabilities, ReservationBinding
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.kubernetes.conftest import NOW, dra_server

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]


@pytest.mark.parametrize(("version", "runtime_config", "taints"), [
    ("v1.34.1", {"resource.k8s.io/v1alpha3"}, "v1alpha3"),
    ("v1.35.0", {"resource.k8s.io/v1alpha3"}, "v1alpha3"),
    ("v1.36.0", set(), "v1beta2"),
    ("v1.37.0", set(), "v1"),
])
def test_claims_pin_the_uuids_and_taints_use_the_served_version(kube, version, runtime_config,
                                                                taints):
    server = dra_server(version=version, runtime_config=runtime_config)
    try:
        kube.configure(server, exact_gpus=True)
        gpus = kube.gpus["gpu-a"][1:3]
        reservation = kube.reserve("vision", gpus)
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        claims = [server.get("ResourceClaimTemplate", f"gq-res-{reservation.pk}", ns)
                  for ns in ("vision", "vision-dev")]
        rules = [server.get("DeviceTaintRule", f"gq-res-{reservation.pk}-gpu-a-gpu{g.index}")
                 for g in gpus]
        posted = {r.path for r in server.writes() if "devicetaintrules" in r.path}
        seen = len(server.requests)
        again = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        second = [r for r in server.requests[seen:] if r.method != "GET"]
    finally:
        server.stop()
    assert summary.outcome == "ok", summary.error
    request = claims[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["count"] == 2 and claims[1] is not None
    for gpu in gpus:
        assert f"'{gpu.uuid}'" in request["selectors"][0]["cel"]["expression"]
    assert request["tolerations"][0]["value"] == "vision"
    assert posted == {f"/apis/resource.k8s.io/{taints}/devicetaintrules"}
    assert [r["spec"]["deviceSelector"] for r in rules] == [
        {"driver": "gpu.nvidia.com", "pool": "gpu-a", "device": f"gpu-{g.index}"} for g in gpus]
    caps = Capabilities.objects.get(cluster=kube.cluster)
    assert caps.facts["device_taint_rules_version"] == taints
    assert not any("DeviceTaintRules are not served" in n for n in caps.notes)
    binding = ReservationBinding.objects.get(reservation=reservation)
    assert binding.level == "exact_gpus" and "nothing keeps other teams" not in binding.why
    assert (again.outcome, second) == ("ok", [])


@pytest.mark.parametrize(("version", "why"), [
    ("v1.34.2", "has them only as resource.k8s.io/v1alpha3, an alpha API"),
    ("v1.35.0", "--runtime-config=resource.k8s.io/v1alpha3=true"),
])
def test_without_device_taint_rules_the_page_says_what_the_mode_cannot_do(kube, version, why):
    server = dra_server(version=version)
    try:
        kube.configure(server, exact_gpus=True)
        reservation = kube.reserve("vision", kube.gpus["gpu-a"][:2])
        summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        taint_calls = [r.path for r in server.requests if "devicetaintrules" in r.path]
        claim = server.get("ResourceClaimTemplate", f"gq-res-{reservation.pk}", "vision")
    finally:
        server.stop()
    assert summary.outcome == "ok", summary.error
    assert taint_calls == [] and claim is not None
    caps = Capabilities.objects.get(cluster=kube.cluster)
    assert caps.facts["device_taint_rules"] is False
    note = next(n for n in caps.notes if n.startswith("DeviceTaintRules are not served"))
    assert why in note and "nothing keeps other teams' claims off those GPUs" in note
    binding = ReservationBinding.objects.get(reservation=reservation)
    assert binding.level == "exact_gpus" and "nothing keeps other teams' claims" in binding.why
    admin = Client()
    admin.force_login(kube.admin)
    page = admin.get(reverse("kubernetes_cluster", args=["kube"])).content.decode()
    assert "DeviceTaintRules are not served" in page and "v1alpha3" in page
