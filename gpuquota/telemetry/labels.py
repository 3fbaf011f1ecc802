"""What dcgm-exporter's labels say, in every variant its releases (and the Prometheus in
front of them) write:

- the GPU: `UUID`, or `uuid` (`--use-old-namespace`); never `Hostname`/`hostname`, which
  was renamed across releases and is the exporter pod's name on Kubernetes;
- its node, for a GPU seen for the first time and for "its node's other GPUs": the
  source's node label, else `Hostname`/`hostname`, else Prometheus's `instance`;
- a MIG instance: `GPU_I_ID` (with `GPU_I_PROFILE`, e.g. `3g.40gb`) on a series of the
  parent GPU's UUID: the exporter does not print the MIG device's own UUID;
- Kubernetes workloads: `namespace`/`pod`/`container`, the old `pod_namespace`/`pod_name`/
  `container_name`, or `exported_namespace`/`exported_pod`/`exported_container` when
  Prometheus scraped without `honor_labels` (its own `namespace`/`pod` are then the
  exporter's, so the exported ones win); with `--kubernetes-virtual-gpus` a shared GPU
  has one series per pod (and a `vgpu` label), otherwise one pod per device;
- the board serial: `DCGM_FI_DEV_SERIAL`, only where the site added the row
  `DCGM_FI_DEV_SERIAL, label, ...` to the exporter's counters file (a `label` row puts the
  field's value on every series under the field's name, as the default set does for
  `DCGM_FI_DRIVER_VERSION`); no default counters file of dcgm-exporter has it;
- Slurm jobs: `hpc_job` (`--hpc-job-mapping-dir`), one series per job a GPU's mapping file
  lists."""

import uuid

from gpuquota.inventory.models import gpu_uuid_normalize

SERIAL_LABEL = "DCGM_FI_DEV_SERIAL"
MIG_NAMESPACE = uuid.UUID("5d0c9a3e-7b21-4c8f-a6e4-1f93b2d7c058")
K8S_VARIANTS = (("exported_namespace", "exported_pod", "exported_container"),
                ("namespace", "pod", "container"),
                ("pod_namespace", "pod_name", "container_name"))


def gpu_uuid(labels: dict) -> str | None:
    """The series' GPU UUID in its stored form, or None (missing or malformed)."""
    try:
        return gpu_uuid_normalize(labels.get("UUID") or labels.get("uuid") or "")
    except ValueError:
        return None


def node_key(labels: dict, node_label: str) -> str:
    """The node a series' GPU sits on, as the labels say."""
    return (labels.get(node_label) or labels.get("Hostname") or labels.get("hostname")
            or labels.get("instance") or "unnamed")[:253]


def mig_instance(labels: dict) -> str:
    """The MIG GPU instance id of a series ("" for a whole GPU)."""
    return labels.get("GPU_I_ID", "")


def mig_device_uuid(parent_uuid: str, instance: str) -> str:
    """A stable MIG-... UUID for a parent GPU's instance: dcgm-exporter names instances by
    their GPU_I_ID only, so the importer names them (the agent sends NVML's own)."""
    return f"MIG-{uuid.uuid5(MIG_NAMESPACE, f'{parent_uuid}|{instance}')}"


def workload(labels: dict) -> tuple[dict, str] | None:
    """(job, container) of the workload a series names, or None."""
    for namespace_label, pod_label, container_label in K8S_VARIANTS:
        namespace, pod = labels.get(namespace_label), labels.get(pod_label)
        if namespace and pod:
            return ({"source": "kubernetes", "id": pod[:256], "account": namespace[:256]},
                    (labels.get(container_label) or "")[:256])
    hpc_job = labels.get("hpc_job") or ""
    if hpc_job:
        return {"source": "slurm", "id": hpc_job[:256]}, ""
    return None

