"""Tier one of agent-protocol.md: parsing a batch and its structural checks.

A structural error (not JSON, not an object, a required field missing or of the
wrong type, a bad batch or instance id) refuses the whole batch; what a field
holds is judged later, record by record (`records.py`).
"""

import gzip
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat
from types import NoneType
from typing import Any

import orjson

from agent import __version__ as RELEASE
from gpuquota.ingest import conf
from gpuquota.ingest.parsing import fields_of, instant_parse, release_parse, uuid_parse

MAX_LISTED_ERRORS = 200
INT64 = 2**63 - 1
LIMITS = {"samples": "MAX_SAMPLES", "processes": "MAX_PROCESSES", "events": "MAX_EVENTS"}


@dataclass
class ProtocolError(Exception):
    """A refusal of the whole batch: `status` 400, 413 or 422, with (path, why) pairs."""

    status: int
    code: str
    detail: str
    errors: list[tuple[str, str]] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def body(self) -> dict:
        errors = [{"field": path, "message": why} for path, why in self.errors]
        return {"code": self.code, "detail": self.detail, "errors": errors, **self.extra}


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def body_decode(raw: bytes, *, content_encoding: str = "") -> Any:
    """The JSON document in a request body, gunzipped when it says so, at most 4 MiB."""
    limit = conf.MAX_BODY_BYTES
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        try:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = inflater.decompress(raw, limit + 1)
        except zlib.error as exc:
            raise ProtocolError(400, "invalid", "The body is not valid gzip.",
                                [("body", str(exc))]) from exc
    elif encoding in ("", "identity"):
        data = raw
    else:
        raise ProtocolError(400, "invalid", f"Unsupported Content-Encoding {encoding!r}.",
                            [("Content-Encoding", "only gzip is supported")])
    if len(data) > limit:
        raise ProtocolError(413, "too_large", f"The body is over {limit} bytes decompressed.",
                            [("body", f"more than {limit} bytes")])
    try:
        return json_decode(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolError(400, "invalid", "The body is not JSON.", [("body", str(exc))]) from exc


def json_decode(data: bytes) -> Any:
    """orjson (a few times faster); the standard parser only for what orjson refuses but JSON
    allows (integers beyond 64 bits). NaN and Infinity are not JSON for either."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data, parse_constant=_refuse_constant)


def gzip_file_decode(raw: bytes) -> Any:
    """A batch read from a file: gzip when it starts with gzip's magic bytes."""
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json_decode(raw)


def _is_int(value: Any) -> bool:
    return (type(value) is int) or (type(value) is float and value.is_integer())


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _is_str(value: Any) -> bool:
    return type(value) is str


KINDS = {"int": (_is_int, "an integer"), "num": (_is_number, "a number"),
         "str": (_is_str, "a string"), "obj": (lambda v: type(v) is dict, "an object")}

# Record shapes: field -> (kind, required). Optional fields may be absent or null.
GPU_SHAPE = {"uuid": ("str", True), "index": ("int", False), "name": ("str", False),
             "pci_bus_id": ("str", False), "memory_total_bytes": ("int", False),
             "power_limit_w": ("num", False), "mig_parent_uuid": ("str", False),
             "serial": ("str", False), "board_part_number": ("str", False)}
SAMPLE_SHAPE = {
    "gpu_uuid": ("str", True), "window_start": ("str", True), "window_end": ("str", True),
    "readings": ("int", True), "seq": ("int", False),
    "util_gpu_avg": ("num", False), "util_gpu_max": ("num", False),
    "util_mem_avg": ("num", False), "memory_used_bytes_avg": ("num", False),
    "memory_used_bytes_max": ("int", False), "power_w_avg": ("num", False),
    "energy_j": ("num", False), "temp_c_max": ("num", False),
    "clock_event_reasons": ("int", False), "ecc_uncorrected": ("int", False),
    "ecc_corrected": ("int", False), "sm_active_avg": ("num", False),
    "sm_occupancy_avg": ("num", False), "tensor_active_avg": ("num", False),
    "dram_active_avg": ("num", False)}
PROCESS_SHAPE = {
    "gpu_uuid": ("str", True), "window_start": ("str", True), "window_end": ("str", True),
    "pid": ("int", True), "pid_start": ("int", True), "uid": ("int", False),
    "user": ("str", False), "command": ("str", False), "job": ("obj", False),
    "memory_used_bytes_max": ("int", False), "util_sm_avg": ("num", False)}
JOB_SHAPE = {"source": ("str", False), "id": ("str", False), "account": ("str", False)}
EVENT_SHAPE = {"event_id": ("str", True), "gpu_uuid": ("str", False), "ts": ("str", True),
               "type": ("str", True), "xid": ("int", False), "detail": ("str", False)}
NODE_SHAPE = {"hostname": ("str", False), "agent_version": ("str", False),
              "driver_version": ("str", False), "boot_id": ("str", False),
              "spool_backlog": ("int", False), "dropped_records_total": ("int", False)}
SHAPES = {"gpus": GPU_SHAPE, "samples": SAMPLE_SHAPE, "processes": PROCESS_SHAPE,
          "events": EVENT_SHAPE}


_FAST_TYPES = {"int": frozenset({int}), "num": frozenset({int, float}), "str": frozenset({str}),
               "obj": frozenset({dict})}
# Per shape: (name, types accepted at once, kind, required), so the common case is one lookup.
_COMPILED = {id(shape): tuple((name, _FAST_TYPES[kind], kind, required)
                              for name, (kind, required) in shape.items())
             for shape in (GPU_SHAPE, SAMPLE_SHAPE, PROCESS_SHAPE, JOB_SHAPE, EVENT_SHAPE,
                           NODE_SHAPE)}


def _shape_errors(record: Any, shape: dict, path: str, errors: list) -> None:
    if type(record) is not dict:
        errors.append((path, "must be an object"))
        return
    get = record.get
    for name, fast, kind, required in _COMPILED[id(shape)]:
        value = get(name)
        if value is None:
            if required:
                errors.append((f"{path}.{name}", "required" if name not in record
                               else "must not be null"))
            continue
        if type(value) in fast:
            continue
        check, wanted = KINDS[kind]
        if check(value):
            continue
        # A job id may come as a number from some schedulers.
        if shape is JOB_SHAPE and name == "id" and _is_int(value):
            continue
        errors.append((f"{path}.{name}", f"must be {wanted}"))
    if shape is PROCESS_SHAPE and type(get("job")) is dict:
        _shape_errors(record["job"], JOB_SHAPE, f"{path}.job", errors)


class CheckedRecords(list):
    """A kind's records whose structure was checked a field at a time: with each field of
    their shape a column (`columns`, by name) and the types found in it, None included
    (`types`), for the judge to use rather than read the records again. A checked batch is
    not changed after its check (the judge relies on it anyway)."""

    __slots__ = ("columns", "types")


def _fit_at_once(records: list, shape: dict) -> bool:
    """Whether every record is an object with every field of its shape of a type taken at
    once (the common case, tested a field at a time over all the records, in C); where not,
    each record is checked on its own for the errors to list."""
    return _fitting(records, shape) is not None


def _fitting(records: list, shape: dict) -> CheckedRecords | None:
    """`records` as `CheckedRecords` where `_fit_at_once`, else None."""
    if set(map(type, records)) != {dict}:
        return None
    compiled = _COMPILED[id(shape)]
    checked = CheckedRecords(records)
    checked.columns, checked.types = {}, {}
    for (name, fast, _, required), column in zip(
            compiled, fields_of(records, tuple(c[0] for c in compiled)), strict=True):
        found = set(map(type, column))
        checked.columns[name], checked.types[name] = column, frozenset(found)
        if not required:
            found.discard(NoneType)
        if not found <= fast:
            return None
    if shape is PROCESS_SHAPE:
        jobs = [job for job in map(dict.get, records, repeat("job")) if job is not None]
        return checked if not jobs or _fit_at_once(jobs, JOB_SHAPE) else None
    return checked


def schema_version_check(body: Any) -> list[tuple[str, str]]:
    """Refuse a body that is not an object or speaks a schema version we do not; a missing or
    non-integer version is returned as a structural error, to be listed with the others."""
    if type(body) is not dict:
        raise ProtocolError(400, "invalid", "The batch is not a JSON object.",
                            [("body", "must be an object")])
    version = body.get("schema_version")
    if version is None or type(version) is not int:
        return [("schema_version", "required" if version is None else "must be an integer")]
    if version not in conf.SUPPORTED_SCHEMA_VERSIONS:
        supported = list(conf.SUPPORTED_SCHEMA_VERSIONS)
        raise ProtocolError(
            422, "unsupported_schema_version",
            f"schema_version {version} is not supported; supported: {supported}.",
            [("schema_version", f"supported versions: {supported}")],
            {"supported_schema_versions": supported})
    return []


def agent_version_check(body: dict) -> None:
    """422 for a gpuquota agent older than the server takes: it keeps its batches spooled and
    retries slowly, so nothing is lost while it waits for its upgrade."""
    node = body.get("node")
    agent = release_parse(node.get("agent_version")) if type(node) is dict else None
    if agent is None or agent >= release_parse(conf.MIN_AGENT_VERSION):
        return
    raise ProtocolError(
        422, "agent_too_old",
        f"agent {node['agent_version']} is older than this server (gpuquota "
        f"{RELEASE}) takes: at least {conf.MIN_AGENT_VERSION}. Upgrade the "
        "agent; it keeps its batches until then.",
        [("node.agent_version", f"at least {conf.MIN_AGENT_VERSION}")],
        {"min_agent_version": conf.MIN_AGENT_VERSION,
         "server_version": RELEASE})


def size_check(body: dict) -> None:
    """413 when a batch holds more records than the protocol allows."""
    errors = []
    for kind, setting in LIMITS.items():
        records = body.get(kind)
        limit = getattr(conf, setting)
        if isinstance(records, list) and len(records) > limit:
            errors.append((kind, f"{len(records)} {kind}; at most {limit}"))
    if errors:
        raise ProtocolError(413, "too_large", "The batch holds too many records; split it.", errors)


def structure_check(body: dict, *, idempotency_key: str | None = None,
                    found: Iterable[tuple[str, str]] = ()) -> None:
    """Every structural error of a batch at once (with those `found` before), as one 400;
    silent when there are none. Samples that fit at once are left as `CheckedRecords`."""
    errors: list[tuple[str, str]] = list(found)
    for name in ("batch_id", "agent_instance_id"):
        if name not in body or body[name] is None:
            errors.append((name, "required"))
        elif uuid_parse(body[name]) is None:
            errors.append((name, "must be a UUID"))
    if type(body.get("sent_at")) is not str:
        why = "required" if body.get("sent_at") is None else "must be a string"
        errors.append(("sent_at", why))
    elif instant_parse(body["sent_at"]) is None:
        errors.append(("sent_at", "must be an ISO 8601 instant with a time zone"))
    for name in ("seq_first", "seq_last"):
        if body.get(name) is not None and not (
                _is_int(body[name]) and -INT64 <= body[name] <= INT64):
            errors.append((name, "must be a 64-bit integer"))
    if "node" not in body or body["node"] is None:
        errors.append(("node", "required"))
    else:
        _shape_errors(body["node"], NODE_SHAPE, "node", errors)
    if idempotency_key is not None and uuid_parse(body.get("batch_id")) is not None:
        if idempotency_key.strip().lower() != body["batch_id"].strip().lower():
            errors.append(("Idempotency-Key", "must equal batch_id"))
    for kind, shape in SHAPES.items():
        records = body.get(kind)
        if records is None:
            continue
        if type(records) is not list and type(records) is not CheckedRecords:
            errors.append((kind, "must be a list"))
            continue
        if (checked := _fitting(records, shape)) is not None:
            if kind == "samples":  # what the judge reads of them
                body[kind] = checked
            continue
        for index, record in enumerate(records):
            _shape_errors(record, shape, f"{kind}[{index}]", errors)
            if len(errors) > MAX_LISTED_ERRORS:
                break
    if errors:
        listed = errors[:MAX_LISTED_ERRORS]
        if len(errors) > MAX_LISTED_ERRORS:
            listed.append(("body", f"and more errors; the first {MAX_LISTED_ERRORS} are listed"))
        raise ProtocolError(400, "invalid", "The batch is malformed; nothing was stored.", listed)


def batch_parse(raw: bytes, *, content_encoding: str = "", idempotency_key: str | None = None
                ) -> dict:
    """A batch whose structure is valid, or a ProtocolError (400, 413 or 422)."""
    body = body_decode(raw, content_encoding=content_encoding)
    return batch_check(body, idempotency_key=idempotency_key)


def batch_check(body: Any, *, idempotency_key: str | None = None) -> dict:
    """The structural tiers on an already decoded document."""
    version_errors = schema_version_check(body)
    if not version_errors:
        agent_version_check(body)
        size_check(body)
    structure_check(body, idempotency_key=idempotency_key, found=version_errors)
    return body
