"""The drain half of the reliability benchmark: on the dev Slurm cluster
(deploy/slurm/dev-cluster), the time from a critical event's batch arriving to its node
showing DRAIN, through the real path: `batch_check` and `batch_ingest` of an XID 79, then
`drains_apply` as the `reliability.drains` task runs it (the runner's `scontrol update
... State=DRAIN`, read back), then the admin's return (`State=RESUME`) before the next
trial. The task runs every `DRAIN_INTERVAL_S`, so an event waits up to that long for it:
the figure reported adds that whole interval to the measured p95 (an upper bound)."""

import shutil
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

TRIALS = 20


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]  # nearest rank


def drain_latency(trials: int = TRIALS) -> dict | None:
    """{"p95_s", "p50_s", "bound_p95_s", "trials"} or None when the dev cluster cannot
    start here (the reason printed)."""
    from django.utils import timezone

    from accounts.models import User
    from gpuquota.demo.slurm import devcluster, slurm_demo_unavailable
    from gpuquota.ingest.batches import batch_ingest
    from gpuquota.ingest.protocol import batch_check
    from gpuquota.inventory.models import Cluster, Node
    from gpuquota.reliability.drains import drain_release, drains_apply
    from gpuquota.reliability.tasks import DRAIN_INTERVAL_S
    from gpuquota.schedulers.models import BackendConfig
    from gpuquota.schedulers.runner import Runner
    from gpuquota.schedulers.slurm.drain import node_state

    why = slurm_demo_unavailable()
    if why:
        print(f"DETAIL drain skipped: {why}")
        return None
    root = Path(tempfile.mkdtemp(prefix="gq-relbench-"))
    cluster_proc = devcluster.DevCluster(root)
    cluster_proc.start()
    try:
        conf = cluster_proc.env["SLURM_CONF"]
        cluster = Cluster.objects.create(name=devcluster.CLUSTER, slug=devcluster.CLUSTER,
                                         scheduler="slurm")
        BackendConfig.objects.create(cluster=cluster, options={"slurm_conf": conf})
        admin = User.objects.create(username="bench-admin", is_staff=True)
        runner = Runner(env=(("SLURM_CONF", conf),))
        nodes = [Node.objects.create(cluster=cluster, hostname=h) for h in devcluster.NODES]
        took = []
        for trial in range(trials):
            node = nodes[trial % len(nodes)]
            time.sleep(1.1)  # a new failure of the node is a later second than its last
            gpu = f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, node.hostname)}"
            now = timezone.now().replace(microsecond=0)
            body = {"schema_version": 1, "sent_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "batch_id": str(uuid.uuid4()), "agent_instance_id": str(uuid.uuid4()),
                    "seq_first": trial, "seq_last": trial,
                    "node": {"hostname": node.hostname, "agent_version": "bench",
                             "boot_id": "b", "spool_backlog": 0, "dropped_records_total": 0},
                    "gpus": [{"uuid": gpu, "index": 0, "name": "NVIDIA H100 80GB HBM3",
                              "mig_parent_uuid": None}],
                    "samples": [], "processes": [],
                    "events": [{"event_id": str(uuid.uuid4()), "gpu_uuid": gpu,
                                "ts": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "type": "xid",
                                "xid": 79, "detail": None}]}
            started = time.monotonic()
            result = batch_ingest(node=node, body=batch_check(body), now=now)
            assert not result.body["rejected"], result.body
            (drain,) = drains_apply(since=now - timedelta(minutes=1),
                                    now=timezone.now().replace(microsecond=0))
            flags, reason = node_state(runner, node.hostname)
            took.append(time.monotonic() - started)
            assert "DRAIN" in flags and reason.startswith("[gpuquota] xid 79"), (flags, reason)
            assert drain.state == "drained", drain.error
            drain_release(drain=drain, by=admin, fix="reboot",
                          at=timezone.now().replace(microsecond=0))
        p95 = _p95(took)
        return {"p95_s": round(p95, 2), "p50_s": round(sorted(took)[len(took) // 2], 2),
                "bound_p95_s": round(p95 + DRAIN_INTERVAL_S, 1), "trials": trials}
    finally:
        cluster_proc.stop()
        shutil.rmtree(root, ignore_errors=True)
