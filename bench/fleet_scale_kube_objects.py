"""The Kubernetes objects a cluster of `bench.fleet_scale_kube` holds besides gpuquota's: its
pods and Kueue's Workloads, as the API server lists them."""

import secrets

IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"


def stamp(at) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    namespace: str,
    node: str,
    *,
    gpus: int,
    started,
    labels: dict,
    phase: str = "Running",
    status: dict | None = None,
) -> dict:
    """A pod as the API server lists it (about 2 KB of JSON, as a small real one)."""
    limits = {"cpu": "16", "memory": "128Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": secrets.token_hex(16),
            "labels": labels,
            "creationTimestamp": stamp(started),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name.rsplit("-", 1)[0],
                    "controller": True,
                    "uid": secrets.token_hex(16),
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
            "serviceAccountName": "default",
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "command": ["torchrun"],
                    "args": ["--nproc-per-node", str(max(gpus, 1)), "train.py"],
                    "resources": {"limits": limits, "requests": limits},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
        "status": status
        or {
            "phase": phase,
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "startTime": stamp(started),
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": stamp(started)}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "image": IMAGE,
                    "imageID": f"{IMAGE}@sha256:{'0' * 64}",
                    "state": {"running": {"startedAt": stamp(started)}},
                }
            ],
        },
    }


def workload(name: str, namespace: str, queue: str, *, admitted, preempted=None) -> dict:
    """Kueue's Workload for a pod's Job, admitted (and preempted to reclaim quota)."""
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "lastTransitionTime": stamp(admitted),
        },
        {
            "type": "Admitted",
            "status": "True",
            "reason": "Admitted",
            "lastTransitionTime": stamp(admitted),
        },
    ]
    if preempted is not None:
        conditions.append(
            {
                "type": "Preempted",
                "status": "True",
                "reason": "InCohortReclamation",
                "message": "Preempted to accommodate a workload in the cohort",
                "lastTransitionTime": stamp(preempted),
            }
        )
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{name}",
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/job-uid": secrets.token_hex(8)},
        },
        "spec": {
            "queueName": queue,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {}}}],
        },
        "status": {
            "conditions": conditions,
            "admission": {"clusterQueue": queue, "podSetAssignments": []},
        },
    }


def gpu_slice(node: str, gpus: list[tuple[int, str]]) -> dict:
    """The ResourceSlice the NVIDIA DRA driver (`gpu.nvidia.com`) publishes for `node`: its
    GPUs (index, NVML UUID) as devices `gpu-<index>` in the pool named after the node, with
    the attributes the driver sets (as `tests.kubernetes.conftest.gpu_slice`, and more)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com-{secrets.token_hex(3)}"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{index}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": uuid},
                        "index": {"int": index},
                        "minor": {"int": index},
                        "productName": {"string": "NVIDIA H100 80GB HBM3"},
                        "brand": {"string": "Nvidia"},
                        "architecture": {"string": "Hopper"},
                        "cudaComputeCapability": {"version": "9.0.0"},
                        "driverVersion": {"version": "580.65.6"},
                        "cudaDriverVersion": {"version": "13.0.0"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for index, uuid in gpus
            ],
        },
    }


def gpu_claim(name: str, namespace: str, node: str, gpus: int, *, pod: str) -> dict:
    """A pod's ResourceClaim (from its team's claim template: it tolerates the team's
    `gpuquota.io/reserved` taint) allocated `gpus` devices of `node`, reserved for the pod,
    as the scheduler leaves it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": secrets.token_hex(16)},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "allocationMode": "ExactCount",
                            "count": gpus,
                            "tolerations": [
                                {
                                    "key": "gpuquota.io/reserved",
                                    "operator": "Equal",
                                    "value": namespace,
                                }
                            ],
                        },
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpus",
                            "driver": "gpu.nvidia.com",
                            "pool": node,
                            "device": f"gpu-{i}",
                        }
                        for i in range(gpus)
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": secrets.token_hex(16)}],
        },
    }
