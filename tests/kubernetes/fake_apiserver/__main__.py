"""Run the fake Kubernetes API server on loopback (with Kueue, admission and DRA kinds) until
Ctrl-C: `python -m tests.kubernetes.fake_apiserver --cluster turing`. With --cluster, point
that Kubernetes cluster's backend at it and reconcile once: the demo's `turing` shows its
bindings and objects at /kubernetes/turing/. Nothing leaves the process: a development and
demo aid, kept in the tests' tree because it is test scaffolding, not part of the product."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import threading
from typing import TextIO


def configure(server, slug: str, *, exact_gpus: bool, out: TextIO) -> None:
    """Point cluster `slug`'s backend at `server` and reconcile it once."""
    from gpuquota.inventory.models import Cluster
    from gpuquota.schedulers.reconcile import cluster_reconcile
    from gpuquota.schedulers.services import backend_config_update

    found = Cluster.objects.filter(slug=slug, scheduler=Cluster.Scheduler.KUBERNETES).first()
    if found is None:
        raise SystemExit(f"No Kubernetes cluster {slug!r}.")
    if exact_gpus:
        for node in found.nodes.all():
            server.put({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": f"{node.hostname}-gpu.nvidia.com"},
                        "spec": {"driver": "gpu.nvidia.com", "nodeName": node.hostname,
                                 "pool": {"name": node.hostname, "generation": 1,
                                          "resourceSliceCount": 1}, "devices": []}})
    backend_config_update(cluster=found, actor=None, token=server.token,
                          api_url=server.url, options={"exact_gpus": exact_gpus})
    # Saving the configuration already asked for a run (in process without a broker).
    summary = cluster_reconcile(cluster=found, reason="fake API server")
    out.write(f"{found.slug}: {summary.outcome}, {len(server.writes())} write(s)"
              + (f": {summary.error}" if summary.error else "") + "\n")
    for request in server.writes():
        out.write(f"  {request.method} {request.path}\n")


def run(argv: list[str], out: TextIO = sys.stdout) -> None:
    """Parse `argv`, start the server, configure the cluster asked for, wait (or not)."""
    from tests.kubernetes.fake_apiserver import FakeApiServer

    parser = argparse.ArgumentParser(prog="python -m tests.kubernetes.fake_apiserver",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", help="slug of a Kubernetes cluster to configure")
    parser.add_argument("--exact-gpus", action="store_true",
                        help="also serve DRA with the NVIDIA driver and use the DRA mode")
    parser.add_argument("--once", action="store_true",
                        help="reconcile once and stop (the server stops with it)")
    parser.add_argument("--kubernetes", default="v1.34.2",
                        help="the Kubernetes release it serves as (the API versions follow)")
    parser.add_argument("--kueue", default="v0.14.1", help="the Kueue release it runs")
    args = parser.parse_args(argv)
    token = secrets.token_urlsafe(24)
    server = FakeApiServer(token=token, version=args.kubernetes,
                           kueue_image=f"registry.k8s.io/kueue/kueue:{args.kueue}").start()
    out.write(f"Fake Kubernetes API at {server.url} (token {token[:6]}…)\n")
    try:
        if args.cluster:
            configure(server, args.cluster, exact_gpus=args.exact_gpus, out=out)
        if not args.once:
            threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    run(sys.argv[1:])
