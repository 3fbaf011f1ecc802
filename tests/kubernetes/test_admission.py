"""The admission policies, rendered from teams and namespaces: valid for Kubernetes 1.37,
every CEL expression compiled by cel-python, and evaluated on AdmissionReview requests,
allowed or refused with the message the user sees."""

import kubernetes_validate
import pytest

from gpuquota.core.errors import DomainError
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


OWNER_API = {"Job": "batch/v1", "JobSet": "jobset.x-k8s.io/v1alpha2", "RayJob": "ray.io/v1",
             "RayCluster": "ray.io/v1", "PyTorchJob": "kubeflow.org/v1", "CronJob": "batch/v1",
             "ReplicaSet": "apps/v1", "DaemonSet": "apps/v1"}
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
CRONJOB_CONTROLLER = "system:serviceaccount:kube-system:cronjob-controller"
JOBSET_CONTROLLER = "system:serviceaccount:jobset-system:jobset-controller-manager"
KUBERAY = "system:serviceaccount:ray-system:kuberay-operator"
TRAINING = "system:serviceaccount:kubeflow:training-operator"
MANAGER = "system:kube-controller-manager"


def meta(queue=None, owner=None):
    m = {"name": "w", "labels": {"kueue.x-k8s.io/queue-name": queue} if queue else {}}
    if owner:
        m["ownerReferences"] = [{"apiVersion": OWNER_API[owner], "kind": owner, "name": "o",
                                 "uid": "u", "controller": True}]
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


def cronjob(spec, *, job_queue=None, **kw):
    template = {"spec": {"template": {"spec": spec}}}
    if job_queue:
        template["metadata"] = {"labels": {"kueue.x-k8s.io/queue-name": job_queue}}
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta(**kw),
            "spec": {"schedule": "0 * * * *", "jobTemplate": template}}


def serving(kind, spec, *, pod_queue=None, **kw):
    template = {"spec": spec}
    if pod_queue:
        template["metadata"] = {"labels": {"kueue.x-k8s.io/queue-name": pod_queue}}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta(**kw),
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "w"}},
                     "template": template}}


def pytorchjob(spec, **kw):
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta(**kw),
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": pod_spec()}},
                "Worker": {"replicas": 3, "template": {"spec": spec}}}}}


def raycluster(spec, **kw):
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta(**kw),
            "spec": {"headGroupSpec": {"template": {"spec": pod_spec()}},
                     "workerGroupSpecs": [{"groupName": "gpu", "template": {"spec": spec}}]}}


def rayjob(spec, **kw):
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta(**kw),
            "spec": {"entrypoint": "python train.py", "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": pod_spec()}},
                "workerGroupSpecs": [{"groupName": "gpu", "template": {"spec": spec}}]}}}


def review(obj, namespace, user="alice", old=None):
    """An AdmissionReview as the API server sends it: `userInfo` is who it authenticated."""
    request = {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
               "operation": "UPDATE" if old else "CREATE", "namespace": namespace,
               "kind": {"kind": obj["kind"]}, "object": obj,
               "userInfo": {"username": user, "groups": ["system:authenticated"]}}
    if old:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


GPU = pod_spec(container(1))
CASES = [
    # (policy, object, namespace, user, refusal or None)
    ("pods", pod(GPU, queue="gq-vision"), "vision", "alice", None),
    ("pods", pod(pod_spec(container(2)), queue="gq-vision"), "vision-dev", "alice", None),
    ("pods", pod(pod_spec(container())), "default", "alice", None),  # no GPU: not ours
    ("pods", pod(pod_spec(container(1, {"NVIDIA_VISIBLE_DEVICES": "all"})),
                 queue="gq-speech"), "speech", "alice", None),
    ("pods", pod(pod_spec(container(env={"NVIDIA_VISIBLE_DEVICES": "void"}))), "vision",
     "alice", None),
    ("pods", pod(GPU, queue="gq-vision"), "default", "alice", NO_TEAM),
    ("pods", pod(GPU, queue="gq-vision"), "speech", "alice", WRONG_QUEUE + "gq-speech"),
    ("pods", pod(GPU), "vision", "alice", WRONG_QUEUE + "gq-vision"),
    ("pods", pod(pod_spec(container(), init=[container(1, name="warm")])), "vision", "alice",
     WRONG_QUEUE + "gq-vision"),
    ("pods", pod({**pod_spec(container()), "resourceClaims": [
        {"name": "gpus", "resourceClaimTemplateName": "gq-res-7"}]}), "vision", "alice",
     WRONG_QUEUE),
    ("pods", pod(pod_spec(container(env={"NVIDIA_VISIBLE_DEVICES": "all"})),
                 queue="gq-vision"), "vision", "alice", BYPASS),
    ("pods", pod(pod_spec(container(env={"CUDA_VISIBLE_DEVICES": "all"}))), "default", "alice",
     BYPASS),
    # A Job's pods, made by the job controller (as the API server authenticated it): judged
    # at their Job. The same pod written by a person, ownerReference and all, is not.
    ("pods", pod(GPU, owner="Job"), "vision", JOB_CONTROLLER, None),
    ("pods", pod(GPU, owner="Job"), "vision", MANAGER, None),
    ("pods", pod(GPU, owner="Job"), "vision", "alice", WRONG_QUEUE + "gq-vision"),
    ("pods", pod(GPU, owner="Job"), "research", "alice", NO_TEAM),
    # The controller manager makes other kinds' pods too: only a Job's are spared.
    ("pods", pod(GPU, owner="ReplicaSet"), "vision", MANAGER, WRONG_QUEUE),
    ("pods", pod(GPU, owner="DaemonSet"), "research", MANAGER, NO_TEAM),
    ("pods", pod(GPU, owner="Job"), "vision", KUBERAY, WRONG_QUEUE),
    ("pods", pod(GPU, owner="RayCluster"), "vision", KUBERAY, None),
    ("pods", pod(GPU, owner="RayCluster"), "vision", "alice", WRONG_QUEUE),
    ("pods", pod(GPU, owner="PyTorchJob"), "vision", TRAINING, None),
    ("jobs", job(pod_spec(container(4)), queue="gq-vision"), "vision", "alice", None),
    ("jobs", job(pod_spec(container(4))), "speech", "alice", WRONG_QUEUE + "gq-speech"),
    ("jobs", job(pod_spec(container(4)), owner="JobSet"), "vision", JOBSET_CONTROLLER, None),
    ("jobs", job(pod_spec(container(4)), owner="JobSet"), "vision", "alice", WRONG_QUEUE),
    # A CronJob's Jobs carry its jobTemplate's labels and are judged as any Job.
    ("jobs", job(GPU, queue="gq-vision", owner="CronJob"), "vision", CRONJOB_CONTROLLER, None),
    ("jobs", job(GPU, owner="CronJob"), "vision", CRONJOB_CONTROLLER, WRONG_QUEUE),
    ("jobs", job(GPU, owner="CronJob"), "research", CRONJOB_CONTROLLER, NO_TEAM),
    ("cronjobs", cronjob(GPU, job_queue="gq-vision"), "vision", "alice", None),
    ("cronjobs", cronjob(pod_spec(container())), "research", "alice", None),
    ("cronjobs", cronjob(GPU), "research", "alice", NO_TEAM),
    ("cronjobs", cronjob(GPU, queue="gq-vision"), "vision", "alice",
     WRONG_QUEUE + "gq-vision (their team's queue) on spec.jobTemplate.metadata"),
    ("deployments", serving("Deployment", GPU, pod_queue="gq-speech"), "speech", "alice", None),
    ("deployments", serving("Deployment", GPU, queue="gq-speech"), "speech", "alice",
     "on its pod template"),
    ("deployments", serving("Deployment", GPU, pod_queue="gq-speech"), "default", "alice",
     NO_TEAM),
    ("statefulsets", serving("StatefulSet", GPU, pod_queue="gq-vision"), "vision", "alice",
     None),
    ("statefulsets", serving("StatefulSet", GPU), "vision", "alice", WRONG_QUEUE),
    ("jobsets", jobset(pod_spec(container(8)), queue="gq-speech"), "speech", "alice", None),
    ("jobsets", jobset(pod_spec(container(8)), queue="gq-vision"), "speech", "alice",
     WRONG_QUEUE),
    ("rayjobs", rayjob(GPU, queue="gq-vision"), "vision", "alice", None),
    ("rayjobs", rayjob(GPU), "research", "alice", NO_TEAM),
    ("rayclusters", raycluster(GPU, queue="gq-vision"), "vision", "alice", None),
    ("rayclusters", raycluster(GPU, owner="RayJob"), "vision", KUBERAY, None),
    ("rayclusters", raycluster(GPU, owner="RayJob"), "vision", "alice", WRONG_QUEUE),
    ("pytorchjobs", pytorchjob(pod_spec(container(8)), queue="gq-vision"), "vision", "alice",
     None),
    ("pytorchjobs", pytorchjob(pod_spec(container(8))), "vision", "alice", WRONG_QUEUE),
    ("pytorchjobs", pytorchjob(pod_spec(container(8)), queue="gq-vision"), "research",
     "alice", NO_TEAM),
]


@pytest.mark.parametrize(("kind", "obj", "namespace", "user", "refusal"), CASES)
def test_admission_review(policies, kind, obj, namespace, user, refusal):
    policy = policies[("ValidatingAdmissionPolicy", f"gq-gpu-{kind}")]
    allowed, message = evaluate(policy, review(obj, namespace, user))
    if refusal is None:
        assert allowed, message
    else:
        assert not allowed and refusal in message and message.startswith("gpuquota: ")


def test_an_update_that_changes_nothing_that_matters_was_judged_at_create(policies):
    """A person labels a running Job's pod: spared, as its pod specs and queue are the same;
    taking a GPU pod out of its queue by an update is judged."""
    policy = policies[("ValidatingAdmissionPolicy", "gq-gpu-pods")]
    running = pod(GPU, owner="Job")
    labelled = {**running, "metadata": {**running["metadata"],
                                        "labels": {"debug": "yes"}}}
    assert evaluate(policy, review(labelled, "vision", "alice", old=running)) == (True, "")
    queued = pod(GPU, queue="gq-vision")
    unqueued = pod(GPU)
    allowed, message = evaluate(policy, review(unqueued, "vision", "alice", old=queued))
    assert not allowed and WRONG_QUEUE in message


def test_policies_and_bindings_are_valid_and_every_expression_compiles(policies):
    assert len(policies) == 18
    for obj in policies.values():
        for release in ("1.30.0", "1.37.0"):
            kubernetes_validate.validate(obj, release, strict=True)
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


def test_the_controllers_are_an_option_and_no_name_can_break_out_of_the_cel():
    site = "system:serviceaccount:batch:job-controller"
    options = options_parse({"workload_controllers": {"Job": [site]}}, cluster_slug="kube")
    policy = next(o for o in admission_objects(QUEUES, cluster_slug="kube", options=options)
                  if o["metadata"]["name"] == "gq-gpu-pods")
    assert evaluate(policy, review(pod(GPU, owner="Job"), "vision", site)) == (True, "")
    assert not evaluate(policy, review(pod(GPU, owner="Job"), "vision", JOB_CONTROLLER))[0]
    with pytest.raises(DomainError, match="workload_controllers.Job"):
        options_parse({"workload_controllers": {"Job": ["x' || true || '"]}},
                      cluster_slug="kube")
    with pytest.raises(DomainError, match="workload_controllers maps"):
        options_parse({"workload_controllers": {"Pod": []}}, cluster_slug="kube")
