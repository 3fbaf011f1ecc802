"""A drain is committed before its scheduler is written (gpuquota/reliability/drainwrite.py):
a transaction rolled back leaves no DeviceTaintRule behind, no database transaction is open
while the API is called (to drain or to return), a drain left pending is written by the next
pass, and a reconcile running while the rule is written keeps it (the pending drain is
planned)."""

import threading
import uuid
from datetime import timedelta

import pytest
import time_machine
from django.db import connection, transaction

from gpuquota.ingest.models import GpuEvent
from gpuquota.reliability.drains import drain_release, drains_apply
from gpuquota.reliability.models import Drain
from gpuquota.schedulers.kubernetes.backend import KubernetesBackend
from gpuquota.schedulers.reconcile import cluster_reconcile
from tests.kubernetes.conftest import NOW, KubeSite, dra_server, gpu_slice

pytestmark = [pytest.mark.kubernetes]
RULE = "gq-drain-gpu-a-gpu2"


def _site_and_server():
    kube = KubeSite()
    server = dra_server(slices=[gpu_slice("gpu-a", kube.gpus["gpu-a"])])
    server.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a"}, "spec": {}})
    kube.configure(server)
    return kube, server


def _fail(gpu, xid: int = 79) -> list[Drain]:
    GpuEvent.objects.create(event_id=uuid.uuid4(), node=gpu.node, gpu=gpu, ts=NOW, type="xid",
                            xid=xid, received_at=NOW)
    return drains_apply(since=NOW - timedelta(minutes=1), now=NOW)


def _rule_writes(server) -> list:
    return [r for r in server.writes() if "devicetaintrules" in r.path]


@pytest.mark.django_db
def test_a_transaction_rolled_back_leaves_no_taint(monkeypatch):
    kube, server = _site_and_server()
    save = Drain.save

    def failing_save(self, *args, **kwargs):
        save(self, *args, **kwargs)
        raise RuntimeError("the database went away")

    monkeypatch.setattr(Drain, "save", failing_save)
    try:
        with pytest.raises(RuntimeError):
            _fail(kube.gpus["gpu-a"][2])
        assert _rule_writes(server) == [] and server.get("DeviceTaintRule", RULE) is None
    finally:
        server.stop()


@pytest.mark.django_db(transaction=True)
def test_the_rule_is_written_after_the_drain_committed_pending(monkeypatch):
    kube, server = _site_and_server()
    seen = {}
    write = KubernetesBackend.gpu_drain

    def watched(self, *, obj):
        seen["in_transaction"] = connection.in_atomic_block

        def read():  # another connection sees only what was committed
            seen["committed"] = list(Drain.objects.values_list("state", "scope"))
            connection.close()

        reader = threading.Thread(target=read)
        reader.start()
        reader.join()
        write(self, obj=obj)

    resume = KubernetesBackend.gpu_resume

    def watched_resume(self, **kwargs):
        seen["resume_in_transaction"] = connection.in_atomic_block
        return resume(self, **kwargs)

    monkeypatch.setattr(KubernetesBackend, "gpu_drain", watched)
    monkeypatch.setattr(KubernetesBackend, "gpu_resume", watched_resume)
    try:
        [drain] = _fail(kube.gpus["gpu-a"][2])
        rule = server.get("DeviceTaintRule", RULE)
        drain_release(drain=drain, by=kube.admin, fix="replaced", at=NOW + timedelta(hours=1))
        gone = server.get("DeviceTaintRule", RULE)
    finally:
        server.stop()
    assert gone is None and seen.pop("resume_in_transaction") is False
    assert seen == {"in_transaction": False, "committed": [("pending", "gpu")]}
    assert (drain.state, drain.scope) == ("drained", "gpu")
    assert rule["spec"]["taint"]["effect"] == "NoExecute"


@pytest.mark.django_db
def test_a_drain_left_pending_is_written_by_the_next_pass_and_kept_by_a_reconcile_meanwhile():
    kube, server = _site_and_server()
    gpu = kube.gpus["gpu-a"][2]
    try:
        with transaction.atomic():  # a pass that died after committing, the rule written
            drain = Drain.objects.create(node=gpu.node, gpu=gpu, reason="xid 79",
                                         needs="replace", event_at=NOW, drained_at=NOW,
                                         state=Drain.State.PENDING, scope=Drain.Scope.GPU)
        _fail(kube.gpus["gpu-b"][0], xid=13)  # a pass (an application XID drains nothing)
        written = server.get("DeviceTaintRule", RULE)
        with time_machine.travel(NOW, tick=False):
            summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        kept = server.get("DeviceTaintRule", RULE)
        deletes = [r for r in server.writes() if r.method == "DELETE"]
    finally:
        server.stop()
    drain.refresh_from_db()
    assert (drain.state, drain.scope) == ("drained", "gpu")
    assert written is not None and summary.outcome == "ok" and kept is not None
    assert deletes == []


@pytest.mark.django_db
def test_a_reconcile_while_the_rule_is_written_keeps_it():
    """The race: the rule on the cluster, its drain committed but not yet marked drained."""
    kube, server = _site_and_server()
    gpu = kube.gpus["gpu-a"][2]
    try:
        Drain.objects.create(node=gpu.node, gpu=gpu, reason="xid 79", needs="replace",
                             event_at=NOW, drained_at=NOW, state=Drain.State.PENDING,
                             scope=Drain.Scope.GPU)
        backend = KubernetesBackend(cluster=kube.cluster, config=kube.cluster.backend_config)
        backend.capabilities()
        backend.gpu_drain(obj=backend.gpu_drain_plan(hostname="gpu-a", index=2, uuid=gpu.uuid,
                                                     reason="xid 79", at_once=True))
        with time_machine.travel(NOW, tick=False):
            summary = cluster_reconcile(cluster=kube.cluster, reason="test", at=NOW)
        kept = server.get("DeviceTaintRule", RULE)
    finally:
        server.stop()
    assert summary.outcome == "ok" and kept is not None
