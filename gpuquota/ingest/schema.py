"""OpenAPI description of the agent endpoints (agent-protocol.md, agent-enrolment.md), plain
Django views that drf-spectacular cannot see: a postprocessing hook adds them to the
published schema.

Field types and which fields are required come from the structural checks themselves
(`protocol.py`'s record shapes), so the schema says exactly what a 400 refuses; the ranges
are the validation table's, where a value out of range is nulled or its record rejected.
"""

from gpuquota.ingest import conf
from gpuquota.ingest.models import EventType
from gpuquota.ingest.protocol import (
    EVENT_SHAPE,
    GPU_SHAPE,
    JOB_SHAPE,
    NODE_SHAPE,
    PROCESS_SHAPE,
    SAMPLE_SHAPE,
)
from gpuquota.ingest.records import JOB_SOURCES, MAX_PID, MAX_STRING, NODE_EVENT_TYPES

PATH = "/api/v1/agent/batches"
ENROL_PATH = "/api/v1/agent/enrol"
SECURITY_SCHEME = "nodeToken"
BOOTSTRAP_SCHEME = "bootstrapSecret"
REF = "#/components/schemas/"
UUID_PATTERN = r"^(GPU|MIG)-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$"
TYPES = {"int": "integer", "num": "number", "str": "string", "obj": "object"}

_GPU_UUID = {"pattern": UUID_PATTERN,
             "description": "NVML UUID, any version bits, compared case-insensitively."}
_WINDOW = {"format": "date-time",
           "description": "Whole seconds with an offset or Z; start < end, 1..600 s long; "
                          "window_end at most 5 minutes after server time, window_start at "
                          "most 8 days before it (else the record is rejected)."}
_PERCENT = {"minimum": 0, "maximum": 100,
            "description": "0..100; up to 100.01 is clamped to 100, beyond is nulled."}
_BYTES = {"minimum": 0, "format": "int64",
          "description": "0 <= avg <= max <= the GPU's memory_total_bytes, else nulled."}
_TEXT = {"maxLength": MAX_STRING, "description": f"At most {MAX_STRING} characters, else nulled."}
_COUNTER = {"minimum": 0, "format": "int64",
            "description": "A per-window delta; negative is nulled."}

# Per shape: what the validation table adds to the structural type of each field.
DETAILS = {
    "AgentNode": {
        "hostname": {**_TEXT, "description": "Informational: the token decides the node."},
        "boot_id": {"maxLength": 64}, "agent_version": {"maxLength": 64},
        "driver_version": {"maxLength": 64}, "spool_backlog": {"minimum": 0},
        "dropped_records_total": {"minimum": 0}},
    "AgentGpu": {
        "uuid": _GPU_UUID, "mig_parent_uuid": {**_GPU_UUID, "description": "For a MIG device."},
        "index": {"minimum": 0}, "memory_total_bytes": {"minimum": 0, "format": "int64"},
        "power_limit_w": {"minimum": 0},
        "name": {"description": "NVML model name; an unmapped model gets a class named after "
                                "it."},
        "serial": {"maxLength": 64, "description": "Optional (agents before 2026-12 omit it): "
                   "the board serial, nvmlDeviceGetSerial; absent for a MIG device and a "
                   "board without one (\"[N/A]\" is read as none). Links RMA records."},
        "board_part_number": {"maxLength": 64, "description": "Optional: "
                              "nvmlDeviceGetBoardPartNumber."}},
    "AgentSample": {
        "gpu_uuid": {**_GPU_UUID, "description": "Listed in gpus or known for this node."},
        "window_start": _WINDOW, "window_end": _WINDOW,
        "readings": {"minimum": 0, "description": "NVML polls aggregated; negative rejects "
                                                  "the record."},
        "util_gpu_avg": {**_PERCENT, "description": "Kernel-active %, <= util_gpu_max + 0.01 "
                                                    "(else nulled); up to 100.01 is clamped."},
        "util_gpu_max": _PERCENT, "util_mem_avg": _PERCENT,
        "memory_used_bytes_avg": _BYTES, "memory_used_bytes_max": _BYTES,
        "power_w_avg": {"minimum": 0, "description": "At most 3 x power_limit_w when known, "
                                                     "else nulled."},
        "energy_j": {"minimum": 0, "description": "Counter delta over the window; at most 3 x "
                                                  "power_limit_w x window length when known."},
        "temp_c_max": {"minimum": -40, "maximum": 150},
        "clock_event_reasons": {"minimum": 0, "format": "int64"},
        "ecc_uncorrected": _COUNTER, "ecc_corrected": _COUNTER,
        "sm_active_avg": {**_PERCENT, "description": "DCGM_FI_PROF_SM_ACTIVE as a percent: "
                                                     "the SMs' mean share of active cycles."},
        "sm_occupancy_avg": {**_PERCENT, "description": "DCGM_FI_PROF_SM_OCCUPANCY as a "
                                                        "percent."},
        "tensor_active_avg": {**_PERCENT, "description": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE as a "
                                                         "percent."},
        "dram_active_avg": {**_PERCENT, "description": "DCGM_FI_PROF_DRAM_ACTIVE as a "
                                                       "percent."}},
    "AgentProcess": {
        "gpu_uuid": _GPU_UUID, "window_start": _WINDOW, "window_end": _WINDOW,
        "pid": {"minimum": 1, "maximum": MAX_PID, "description": "Out of range rejects the "
                                                                 "record."},
        "pid_start": {"minimum": 0, "format": "int64"}, "uid": {"minimum": 0},
        "user": _TEXT, "command": {**_TEXT, "description": "Program name only, never the full "
                                                            "command line."},
        "job": {"$ref": f"{REF}AgentJob"}, "memory_used_bytes_max": _BYTES,
        "util_sm_avg": _PERCENT},
    "AgentJob": {
        "source": {"enum": sorted(JOB_SOURCES)},
        "id": {"description": "Scheduler job id (a number is accepted too)."},
        "account": {**_TEXT, "description": "Slurm account or Kubernetes namespace."}},
    "AgentEvent": {
        "event_id": {"format": "uuid", "description": "The event's identity; resends are "
                                                      "stored once."},
        "gpu_uuid": {**_GPU_UUID, "description": "Null for node-level types: "
                                                 f"{', '.join(sorted(NODE_EVENT_TYPES))}."},
        "ts": {"format": "date-time", "description": "Same bounds as window_end and "
                                                     "window_start."},
        "type": {"enum": list(EventType.values)},
        "xid": {"description": "Required when type is xid (else the event is rejected)."},
        "detail": _TEXT},
}
SHAPES = {"AgentNode": NODE_SHAPE, "AgentGpu": GPU_SHAPE, "AgentSample": SAMPLE_SHAPE,
          "AgentProcess": PROCESS_SHAPE, "AgentJob": JOB_SHAPE, "AgentEvent": EVENT_SHAPE}


def _record_schema(name: str) -> dict:
    """An object schema from a structural shape: required fields, the rest nullable."""
    properties, required = {}, []
    for field, (kind, needed) in SHAPES[name].items():
        extra = DETAILS[name].get(field, {})
        if "$ref" in extra:  # OpenAPI 3.0: a $ref takes no siblings, so wrap it to be nullable
            prop = {"allOf": [extra], "nullable": True}
        else:
            prop = {"type": TYPES[kind], **extra}
        if needed:
            required.append(field)
        elif "$ref" not in extra:
            prop["nullable"] = True
        properties[field] = prop
    schema = {"type": "object", "properties": properties,
              "description": "Unknown fields are ignored."}
    if required:
        schema["required"] = required
    return schema


def _list_of(name: str, limit: int | None = None) -> dict:
    schema = {"type": "array", "items": {"$ref": f"{REF}{name}"}, "nullable": True}
    if limit is not None:
        schema["maxItems"] = limit
    return schema


def _components() -> dict:
    schemas = {name: _record_schema(name) for name in SHAPES}
    schemas["AgentBatch"] = {
        "type": "object",
        "description": "One agent batch. A batch with no samples is a valid heartbeat; "
                       "unknown fields are ignored.",
        "properties": {
            "schema_version": {"type": "integer", "enum": list(conf.SUPPORTED_SCHEMA_VERSIONS)},
            "batch_id": {"type": "string", "format": "uuid",
                         "description": "Remembered per node for at least 8 days."},
            "agent_instance_id": {"type": "string", "format": "uuid"},
            "seq_first": {"type": "integer", "format": "int64", "nullable": True},
            "seq_last": {"type": "integer", "format": "int64", "nullable": True},
            "sent_at": {"type": "string", "format": "date-time"},
            "node": {"$ref": f"{REF}AgentNode"},
            "gpus": _list_of("AgentGpu"),
            "samples": _list_of("AgentSample", conf.MAX_SAMPLES),
            "processes": _list_of("AgentProcess", conf.MAX_PROCESSES),
            "events": _list_of("AgentEvent", conf.MAX_EVENTS),
        },
        "required": ["schema_version", "batch_id", "agent_instance_id", "sent_at", "node"],
    }
    counts = {"type": "integer", "minimum": 0}
    schemas["AgentRecordCounts"] = {
        "type": "object", "required": ["stored", "duplicates", "conflicts"],
        "properties": {"stored": counts, "duplicates": counts, "conflicts": {
            **counts, "description": "Already stored with different values: the first wins."}}}
    schemas["AgentRecordNote"] = {
        "type": "object", "required": ["path", "why"],
        "properties": {"path": {"type": "string"}, "why": {"type": "string"}}}
    notes = {"type": "array", "items": {"$ref": f"{REF}AgentRecordNote"}}
    schemas["AgentBatchReceipt"] = {
        "type": "object",
        "required": ["batch_id", "samples", "processes", "events", "rejected", "nulled"],
        "properties": {
            "batch_id": {"type": "string", "format": "uuid"},
            **{kind: {"$ref": f"{REF}AgentRecordCounts"}
               for kind in ("samples", "processes", "events")},
            "rejected": {**notes, "description": "Records not stored."},
            "nulled": {**notes, "description": "Records stored with this field null."}}}
    schemas["AgentError"] = {
        "type": "object", "required": ["code", "detail", "errors"],
        "properties": {
            "code": {"type": "string"}, "detail": {"type": "string"},
            "errors": {"type": "array", "items": {
                "type": "object", "required": ["field", "message"],
                "properties": {"field": {"type": "string", "description": "The path."},
                               "message": {"type": "string"}}}},
            "supported_schema_versions": {"type": "array", "items": {"type": "integer"},
                                          "description": "422 only."},
            "min_agent_version": {"type": "string",
                                  "description": "422 agent_too_old only: the oldest agent "
                                                 "this server takes."},
            "server_version": {"type": "string",
                               "description": "422 agent_too_old only."}}}
    return schemas


def _response(description: str, schema: str, headers: dict | None = None) -> dict:
    response = {"description": description,
                "content": {"application/json": {"schema": {"$ref": f"{REF}{schema}"}}}}
    if headers:
        response["headers"] = {name: {"schema": {"type": "string"}, "description": text}
                               for name, text in headers.items()}
    return response


def _operation() -> dict:
    return {
        "operationId": "v1_agent_batches_create",
        "summary": "Send one batch of GPU telemetry (node agents)",
        "description": "The node agent protocol, version 1 (agent-protocol.md). Structural "
                       "errors refuse the whole batch (400, nothing stored); record errors "
                       "never do: the valid records are stored (202) and the others listed "
                       "as rejected or nulled.",
        "tags": ["v1"],
        "security": [{SECURITY_SCHEME: []}],
        "parameters": [
            {"in": "header", "name": "Idempotency-Key", "required": False,
             "schema": {"type": "string", "format": "uuid"},
             "description": "If present, must equal the body's batch_id (else 400)."},
            {"in": "header", "name": "Content-Encoding", "required": False,
             "schema": {"type": "string", "enum": ["gzip", "identity"]},
             "description": "gzip is decompressed, at most 4 MiB decompressed."}],
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": {"$ref": f"{REF}AgentBatch"}}}},
        "responses": {
            "202": _response("Stored durably; what was not taken is listed.",
                             "AgentBatchReceipt"),
            "200": _response("This batch_id was already stored for this node: the first "
                             "response's body.", "AgentBatchReceipt"),
            "400": _response("Structural error: every problem by path; nothing stored.",
                             "AgentError"),
            "401": _response("Token missing, unknown or revoked.", "AgentError",
                             {"WWW-Authenticate": "Bearer"}),
            "413": _response("Over 5000 samples, 5000 processes, 1000 events or 4 MiB "
                             "decompressed: split it, each part with a new batch_id.",
                             "AgentError"),
            "422": _response("schema_version not supported (supported_schema_versions says "
                             "which are), or the agent is older than min_agent_version "
                             "(code agent_too_old): keep the batch spooled, retry slowly.",
                             "AgentError"),
            "429": _response("The node sends faster than INGEST_NODE_BATCHES_PER_MINUTE: "
                             "resend after Retry-After seconds.", "AgentError",
                             {"Retry-After": "Seconds to wait."}),
            "503": _response("Storage unavailable: resend later.", "AgentError",
                             {"Retry-After": "Seconds to wait."}),
        },
    }


def _enrol_operation() -> dict:
    return {
        "operationId": "v1_agent_enrol_create",
        "summary": "Enrol this node with the cluster's bootstrap secret (node agents)",
        "description": "Once per node (agent-enrolment.md): the answer holds the node's own "
                       "token. A node already enrolled is refused (409), a revoked one too "
                       "(403); the bootstrap secret can never send batches.",
        "tags": ["v1"],
        "security": [{BOOTSTRAP_SCHEME: []}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["node_name"], "properties": {"node_name": {
                "type": "string", "maxLength": 253,
                "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                "description": "The node's name (Kubernetes: spec.nodeName)."}}}}}},
        "responses": {
            "201": {"description": "Enrolled: the node's token, shown this once.",
                    "content": {"application/json": {"schema": {
                        "type": "object", "required": ["node", "cluster", "token",
                                                       "token_prefix"],
                        "properties": {k: {"type": "string"} for k in (
                            "node", "cluster", "token", "token_prefix")}}}}},
            "400": _response("The body is not {\"node_name\": <DNS-1123 name>}.", "AgentError"),
            "401": _response("Bootstrap secret missing, unknown, rotated or revoked.",
                             "AgentError", {"WWW-Authenticate": "Bearer"}),
            "403": _response("The node's token was revoked by an admin.", "AgentError"),
            "409": _response("The node is already enrolled.", "AgentError"),
            "503": _response("Storage unavailable: enrol again later.", "AgentError",
                             {"Retry-After": "Seconds to wait."}),
        },
    }


def agent_batches_schema(result: dict, generator=None, request=None, public=None, **kwargs
                         ) -> dict:
    """drf-spectacular postprocessing hook: the schema with the agent endpoints added."""
    components = result.setdefault("components", {})
    components.setdefault("schemas", {}).update(_components())
    components.setdefault("securitySchemes", {})[SECURITY_SCHEME] = {
        "type": "http", "scheme": "bearer",
        "description": "A node token (gqn_...), issued when the node is enrolled."}
    components["securitySchemes"][BOOTSTRAP_SCHEME] = {
        "type": "http", "scheme": "bearer",
        "description": "A cluster's bootstrap secret (gqb_...): it can only enrol."}
    paths = {**result.get("paths", {}), PATH: {"post": _operation()},
             ENROL_PATH: {"post": _enrol_operation()}}
    result["paths"] = dict(sorted(paths.items()))
    return result
