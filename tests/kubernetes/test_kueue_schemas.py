"""The Kueue kinds' JSON Schemas (v1beta1): what the backend renders passes, and each rule
written from Kueue's API reference refuses what Kueue refuses. The exact-GPU objects pass
Kubernetes 1.37's own schemas."""

import copy
from datetime import UTC, datetime, timedelta

import jsonschema
import kubernetes_validate
import pytest

from gpuquota.schedulers.kubernetes.objects import dra_objects, kueue_objects
from gpuquota.schedulers.kubernetes.options import options_parse
from gpuquota.schedulers.selectors import (
    GpuRef,
    LoanInput,
    PlanInputs,
    ReservationInput,
    TeamInput,
)
from tests.kubernetes.fake_apiserver.kueue_schemas import KUEUE_API_REFERENCE, SCHEMAS, kueue_errors

pytestmark = pytest.mark.kubernetes
AT = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
GPUS = (GpuRef(1, "GPU-8f0e6c1a-5b1f-4c43-9a36-0d6b8b1e2f01", "gpu-a", 0),
        GpuRef(2, "GPU-8f0e6c1a-5b1f-4c43-9a36-0d6b8b1e2f02", "gpu-a", 1))


def inputs() -> PlanInputs:
    plan = PlanInputs(at=AT, classes=("H100-80GB", "L4"))
    plan.teams = {1: TeamInput(1, "vision", (), ("vision", "vision-dev"), ()),
                  2: TeamInput(2, "speech", (), ("speech",), ())}
    plan.reservations = [ReservationInput(7, 1, "vision", "H100-80GB", 2, AT - timedelta(hours=1),
                                          AT + timedelta(hours=1), GPUS)]
    plan.loans = [LoanInput(3, 7, 1, GPUS[1], AT)]
    return plan


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    options = options_parse({"borrowing_limit": 4, "flavors": {"L4": {
        "node_labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}, "tolerations": []}}},
        cluster_slug="kube")
    return kueue_objects(inputs(), cluster_slug="kube", options=options)


def test_the_schemas_are_valid_json_schemas_and_name_the_kueue_version():
    assert "v1beta1" in KUEUE_API_REFERENCE
    for schema in SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_every_rendered_kueue_object_is_valid(rendered):
    assert [o["kind"] for o in rendered] == ["ResourceFlavor"] * 2 + ["ClusterQueue"] * 2 + [
        "LocalQueue"] * 3
    for obj in rendered:
        assert kueue_errors(obj) == [], obj
    vision = next(o for o in rendered if o["metadata"]["name"] == "gq-vision")
    h100 = vision["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert h100 == {"name": "nvidia.com/gpu", "nominalQuota": "2", "lendingLimit": "1",
                    "borrowingLimit": "4"}
    l4 = next(o for o in rendered if o["metadata"]["name"] == "gq-l4")
    assert l4["spec"] == {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                          "tolerations": []}


def _broken(rendered, kind, change):
    obj = copy.deepcopy(next(o for o in rendered if o["kind"] == kind))
    change(obj)
    return kueue_errors(obj)


@pytest.mark.parametrize(("kind", "change", "where"), [
    ("ClusterQueue", lambda o: o["spec"]["preemption"].update(reclaimWithinCohort="Always"),
     "spec.preemption.reclaimWithinCohort"),
    ("ClusterQueue", lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
     .update(nominalQuota=-1), "spec.resourceGroups.0.flavors.0.resources.0.nominalQuota"),
    ("ClusterQueue", lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
     .update(nominalQuota="lots"), "spec.resourceGroups.0.flavors.0.resources.0.nominalQuota"),
    ("ClusterQueue", lambda o: o["spec"].update(queueingStrategy="LIFO"),
     "spec.queueingStrategy"),
    ("ClusterQueue", lambda o: o["spec"].update(cohorts="x"), "spec"),
    ("ClusterQueue", lambda o: o["metadata"].update(name="Vision"), "metadata.name"),
    ("ClusterQueue", lambda o: o["spec"]["resourceGroups"][0].update(flavors=[]),
     "spec.resourceGroups.0.flavors"),
    ("LocalQueue", lambda o: o["spec"].pop("clusterQueue"), "spec"),
    ("LocalQueue", lambda o: o["metadata"].pop("namespace"), "metadata"),
    ("ResourceFlavor", lambda o: o["spec"].update(nodeLabels={f"k{i}": "v" for i in range(9)}),
     "spec.nodeLabels"),
    ("ResourceFlavor", lambda o: o["spec"]["tolerations"].append({"operator": "Sometimes"}),
     "spec.tolerations"),
    ("ResourceFlavor", lambda o: o.update(apiVersion="kueue.x-k8s.io/v1alpha1"), "apiVersion"),
])
def test_each_rule_refuses_what_kueue_refuses(rendered, kind, change, where):
    errors = _broken(rendered, kind, change)
    assert errors and any(e.startswith(where) for e in errors), errors


def test_workloads_as_kueue_writes_them_are_read_and_checked():
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                "metadata": {"name": "job-train-3c1a", "namespace": "vision"},
                "spec": {"queueName": "gq-vision", "podSets": [
                    {"name": "main", "count": 2, "template": {"spec": {"containers": []}}}]},
                "status": {"admission": {"clusterQueue": "gq-vision", "podSetAssignments": []},
                           "conditions": [{"type": "Evicted", "status": "True",
                                           "reason": "Preempted", "message": "reclaim"}]}}
    assert kueue_errors(workload) == []
    workload["spec"]["podSets"] = []
    assert any(e.startswith("spec.podSets") for e in kueue_errors(workload))


@pytest.mark.parametrize(("release", "taints"), [
    ("1.34.0", "resource.k8s.io/v1alpha3"), ("1.35.0", "resource.k8s.io/v1alpha3"),
    ("1.36.0", "resource.k8s.io/v1beta2"), ("1.37.0", "resource.k8s.io/v1")])
def test_exact_gpu_objects_are_valid_for_the_release_that_serves_them(release, taints):
    options = options_parse({"exact_gpus": True}, cluster_slug="kube")
    objects = dra_objects(inputs(), cluster_slug="kube", options=options,
                          taint_api_version=taints)
    # GPUS[1] is on loan: not in the claim, not tainted.
    assert [o["kind"] for o in objects] == ["ResourceClaimTemplate"] * 2 + ["DeviceTaintRule"]
    assert objects[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    for obj in objects:
        kubernetes_validate.validate(obj, release, strict=True)
