"""The admission policies, rendered from teams and namespaces: valid for Kubernetes 1.37,
every CEL expression compiled by cel-python, and evaluated on AdmissionReview requests,
allowed or refused with the message the user sees."""

import kubernetes_validate
import pytest

from gpuquota.schedulers.kubernetes.admission import EXEMPT_NAMESPACES, admission_objects
from gpuquota.schedulers.kubernetes.options import options_parse
from tests.kubernetes.cel import compiles, evaluate

pytestmark = pytest.mark.kubernetes
QUEUES = {"vision": "gq-vision", "vision-dev": "gq-vision", "speech": "gq-speech"}
NO_TEAM = "belongs to no team"
WRONG_QUEUE = "need the label kueue.x-k8s.io/queue-name: "
BYPASS = "without requesting a GPU"


@pytest.fixture(scope="module")
def policies() -> dict[str, dict]:
    objects = admission_objects(QUEUES, cluster_slug="kube",
                                options=options_parse({}, cluster_slug="kube"))
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def container(gpus=0, env=None, name="main"):
    c = {"name": name, "image": "registry.example.org/train:1"}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return c


def pod_spec(*containers, init=()):
    spec = {"containers": list(containers) or [container()], "restartPolicy": "Never"}
    if init:
        spec["initContainers"] = list(init)
    return spec


def meta(queue=None, owner=None):
    m = {"name": "w", "labels": {"kueue.x-k8s.io/queue-name": queue} if queue else {}}
    if owner:
        m["ownerReferences"] = [{"apiVersion": "v1", "kind": owner, "name": "o", "uid": "u",
                                 "controller": True}]
    return m


def pod(spec, **kw):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta(**kw), "spec": spec}


def job(spec, **kw):
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(**kw),
            "spec": {"template": {"spec": spec}}}


def jobset(spec, **kw):
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta(**kw),
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {
                "spec": {"template": {"spec": spec}}}}]}}


def rayjob(spec, **kw):
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta(**kw),
            "spec": {"entrypoint": "python train.py", "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": pod_spec()}},
                "workerGroupSpecs": [{"groupName": "gpu", "template": {"spec": spec}}]}}}


def review(obj, namespace):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": "CREATE",
        "namespace": namespace, "kind": {"kind": obj["kind"]}, "object": obj}}


CASES = [
    # (policy, object, namespace, refusal or None)
    ("pods", pod(pod_spec(container(1)), queue="gq-vision"), "vision", None),
    ("pods", pod(pod_spec(container(2)), queue="gq-vision"), "vision-dev", None),
    ("pods", pod(pod_spec(container())), "default", None),  # no GPU: not ours to judge
    ("pods", pod(pod_spec(container(1)), owner="Job"), "vision", None),  # judged as its Job
    ("pods", pod(pod_spec(container(1, {"NVIDIA_VISIBLE_DEVICES": "all"})),
                 queue="gq-speech"), "speech", None),
    ("pods", pod(pod_spec(container(env={"NVIDIA_VISIBLE_DEVICES": "void"}))), "vision", None),
    ("pods", pod(pod_spec(container(1)), queue="gq-vision"), "default", NO_TEAM),
    ("pods", pod(pod_spec(container(1)), queue="gq-vision"), "speech", WRONG_QUEUE + "gq-speech"),
    ("pods", pod(pod_spec(container(1))), "vision", WRONG_QUEUE + "gq-vision"),
    ("pods", pod(pod_spec(container(), init=[container(1, name="warm")])), "vision",
     WRONG_QUEUE + "gq-vision"),
    ("pods", pod(pod_spec(container(1)), owner="ReplicaSet"), "vision", WRONG_QUEUE),
    ("pods", pod({**pod_spec(container()), "resourceClaims": [
        {"name": "gpus", "resourceClaimTemplateName": "gq-res-7"}]}), "vision", WRONG_QUEUE),
    ("pods", pod(pod_spec(container(env={"NVIDIA_VISIBLE_DEVICES": "all"})),
                 queue="gq-vision"), "vision", BYPASS),
    ("pods", pod(pod_spec(container(env={"CUDA_VISIBLE_DEVICES": "all"}))), "default", BYPASS),
    ("jobs", job(pod_spec(container(4)), queue="gq-vision"), "vision", None),
    ("jobs", job(pod_spec(container(4)), owner="JobSet"), "vision", None),
    ("jobs", job(pod_spec(container(4))), "speech", WRONG_QUEUE + "gq-speech"),
    ("jobsets", jobset(pod_spec(container(8)), queue="gq-speech"), "speech", None),
    ("jobsets", jobset(pod_spec(container(8)), queue="gq-vision"), "speech", WRONG_QUEUE),
    ("rayjobs", rayjob(pod_spec(container(1)), queue="gq-vision"), "vision", None),
    ("rayjobs", rayjob(pod_spec(container(1))), "research", NO_TEAM),
]


@pytest.mark.parametrize(("kind", "obj", "namespace", "refusal"), CASES)
def test_admission_review(policies, kind, obj, namespace, refusal):
    policy = policies[("ValidatingAdmissionPolicy", f"gq-gpu-{kind}")]
    allowed, message = evaluate(policy, review(obj, namespace))
    if refusal is None:
        assert allowed, message
    else:
        assert not allowed and refusal in message and message.startswith("gpuquota: ")


def test_policies_and_bindings_are_valid_and_every_expression_compiles(policies):
    assert len(policies) == 10
    for obj in policies.values():
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
        spec = obj["spec"]
        for variable in spec.get("variables", []):
            compiles(variable["expression"])
        for validation in spec.get("validations", []):
            compiles(validation["expression"])
            if "messageExpression" in validation:
                compiles(validation["messageExpression"])


def test_bindings_deny_and_spare_the_operators_namespaces(policies):
    bindings = [o for o in policies.values() if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert ("ValidatingAdmissionPolicy", binding["spec"]["policyName"]) in policies
        expression = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]
        assert expression["operator"] == "NotIn" and "gpuquota" in expression["values"]
    assert set(EXEMPT_NAMESPACES) >= {"kube-system", "gpu-operator", "gpuquota"}


def test_a_syntax_error_would_be_caught():
    with pytest.raises(Exception):  # noqa: B017 - cel-python's parse error class
        compiles("object.spec.containers.exists(c, ")
