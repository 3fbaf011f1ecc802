"""Batches in the agent protocol's shape, enrolled nodes, and a client that posts them."""

import gzip
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.test import Client
from django.utils import timezone

from gpuquota.ingest.services import IssuedToken, node_enrol
from tests.factories import ClusterFactory

URL = "/api/v1/agent/batches"


def iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def recent_minute(minutes_ago: int = 2) -> datetime:
    """A whole-minute instant shortly before now (windows are accepted up to 8 days back)."""
    return timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes_ago)


def new_gpu_uuid(prefix: str = "GPU") -> str:
    return f"{prefix}-{uuid.uuid4()}"


def gpu_entry(uuid_: str, *, index: int = 0, parent: str | None = None, **extra) -> dict:
    return {"uuid": uuid_, "index": index, "name": "NVIDIA H200",
            "pci_bus_id": f"00000000:{index + 16:02X}:00.0",
            "memory_total_bytes": 150754820096, "power_limit_w": 700,
            "mig_parent_uuid": parent, **extra}


def sample(gpu_uuid: str, start: datetime, *, length_s: int = 60, **extra) -> dict:
    return {"seq": 1, "gpu_uuid": gpu_uuid, "window_start": iso(start),
            "window_end": iso(start + timedelta(seconds=length_s)), "readings": 6,
            "util_gpu_avg": 87.5, "util_gpu_max": 100.0, "util_mem_avg": 41.0,
            "memory_used_bytes_avg": 61203283968, "memory_used_bytes_max": 70123456512,
            "power_w_avg": 512.0, "energy_j": 30720.0, "temp_c_max": 71,
            "clock_event_reasons": 4, "ecc_uncorrected": 0, "ecc_corrected": 0, **extra}


def process(gpu_uuid: str, start: datetime, *, pid: int = 48211, **extra) -> dict:
    return {"gpu_uuid": gpu_uuid, "window_start": iso(start),
            "window_end": iso(start + timedelta(seconds=60)), "pid": pid,
            "pid_start": 912345678, "uid": 1012, "user": "alice", "command": "python",
            "job": {"source": "slurm", "id": "123456", "account": "physics"},
            "memory_used_bytes_max": 60129542144, "util_sm_avg": 83.0, **extra}


def event(gpu_uuid: str | None, ts: datetime, *, type_: str = "xid", **extra) -> dict:
    return {"event_id": str(uuid.uuid4()), "gpu_uuid": gpu_uuid, "ts": iso(ts), "type": type_,
            "xid": 79 if type_ == "xid" else None, "detail": "GPU has fallen off the bus",
            **extra}


def batch(*, gpus=(), samples=(), processes=(), events=(), **extra) -> dict:
    return {"schema_version": 1, "batch_id": str(uuid.uuid4()),
            "agent_instance_id": str(uuid.uuid4()), "seq_first": 1, "seq_last": 1,
            "sent_at": iso(timezone.now()),
            "node": {"hostname": "gpu-node-07", "agent_version": "1.0.0",
                     "driver_version": "580.65.06", "boot_id": str(uuid.uuid4()),
                     "spool_backlog": 0, "dropped_records_total": 0},
            "gpus": list(gpus), "samples": list(samples), "processes": list(processes),
            "events": list(events), **extra}


def enrolled(hostname: str = "gpu-node-07", cluster=None) -> IssuedToken:
    return node_enrol(cluster=cluster or ClusterFactory(), hostname=hostname, actor=None)


@dataclass
class Agent:
    """A node's agent talking to the test server."""

    token: str
    client: Client

    def post(self, body, *, compress: bool = False, headers: dict | None = None,
             raw: bytes | None = None):
        data = raw if raw is not None else json.dumps(body).encode()
        extra = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}
        if compress:
            data = gzip.compress(data)
            extra["HTTP_CONTENT_ENCODING"] = "gzip"
        for name, value in (headers or {}).items():
            extra[f"HTTP_{name.upper().replace('-', '_')}"] = value
        return self.client.post(URL, data=data, content_type="application/json", **extra)
