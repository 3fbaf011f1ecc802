"""JSON Schemas of the Kueue kinds gpuquota writes or reads (kueue.x-k8s.io/v1beta1), written
from Kueue's API reference for v0.14 (`KUEUE_API_REFERENCE`): every field we set, with its
type, enum, limits and name format. The fake API server refuses with a 422 what they refuse,
as Kueue's CRD validation does; the tests validate every rendered object against them."""

from __future__ import annotations

import copy
from functools import cache

import jsonschema

from tests.kubernetes.fake_apiserver.kueue_api import release_minor

KUEUE_API_REFERENCE = "Kueue v0.14, kueue.x-k8s.io/v1beta1"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta1"

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
QUANTITY = {"anyOf": [{"type": "integer", "minimum": 0},
                      {"type": "string",
                       "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                                  r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
                                  r"|(\.[0-9]+))))?$"}]}
NAME = {"type": "string", "maxLength": 253, "pattern": DNS1123_SUBDOMAIN}
LABELS = {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63,
                                                     "pattern": LABEL_VALUE}}


def _metadata(namespaced: bool) -> dict:
    props = {"name": NAME, "labels": LABELS, "annotations": {"type": "object"},
             "resourceVersion": {"type": "string"}, "uid": {"type": "string"},
             "generation": {"type": "integer"}, "creationTimestamp": {"type": "string"}}
    if namespaced:
        props["namespace"] = {"type": "string", "maxLength": 63, "pattern": DNS1123_LABEL}
    return {"type": "object", "required": ["name"] + (["namespace"] if namespaced else []),
            "properties": props}


def _kind(kind: str, spec: dict, *, namespaced: bool, status: dict | None = None) -> dict:
    return {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {"apiVersion": {"const": f"{GROUP}/{VERSION}"}, "kind": {"const": kind},
                       "metadata": _metadata(namespaced), "spec": spec,
                       "status": status or {"type": "object"}},
    }


TOLERATION = {"type": "object", "additionalProperties": False, "properties": {
    "key": {"type": "string"}, "operator": {"enum": ["Exists", "Equal"]},
    "value": {"type": "string"}, "effect": {"enum": ["NoSchedule", "PreferNoSchedule",
                                                     "NoExecute"]},
    "tolerationSeconds": {"type": "integer"}}}
LABEL_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": LABELS,
    "matchExpressions": {"type": "array", "items": {
        "type": "object", "required": ["key", "operator"], "additionalProperties": False,
        "properties": {"key": {"type": "string"},
                       "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                       "values": {"type": "array", "items": {"type": "string"}}}}}}}

RESOURCE_FLAVOR = _kind("ResourceFlavor", {
    "type": "object", "additionalProperties": False, "properties": {
        "nodeLabels": {**LABELS, "maxProperties": 8},
        "tolerations": {"type": "array", "maxItems": 8, "items": TOLERATION},
        "nodeTaints": {"type": "array", "maxItems": 8, "items": {"type": "object"}},
        "topologyName": NAME}}, namespaced=False)

FLAVOR_QUOTAS = {"type": "object", "required": ["name", "resources"],
                 "additionalProperties": False, "properties": {
    "name": NAME,
    "resources": {"type": "array", "minItems": 1, "maxItems": 64, "items": {
        "type": "object", "required": ["name", "nominalQuota"], "additionalProperties": False,
        "properties": {"name": {"type": "string"}, "nominalQuota": QUANTITY,
                       "borrowingLimit": QUANTITY, "lendingLimit": QUANTITY}}}}}

CLUSTER_QUEUE = _kind("ClusterQueue", {
    "type": "object", "additionalProperties": False, "properties": {
        "resourceGroups": {"type": "array", "maxItems": 16, "items": {
            "type": "object", "required": ["coveredResources", "flavors"],
            "additionalProperties": False, "properties": {
                "coveredResources": {"type": "array", "minItems": 1, "maxItems": 64,
                                     "items": {"type": "string"}},
                "flavors": {"type": "array", "minItems": 1, "maxItems": 64,
                            "items": FLAVOR_QUOTAS}}}},
        "cohort": NAME,
        "queueingStrategy": {"enum": ["StrictFIFO", "BestEffortFIFO"]},
        "namespaceSelector": LABEL_SELECTOR,
        "flavorFungibility": {"type": "object", "additionalProperties": False, "properties": {
            "whenCanBorrow": {"enum": ["Borrow", "TryNextFlavor"]},
            "whenCanPreempt": {"enum": ["Preempt", "TryNextFlavor"]}}},
        "preemption": {"type": "object", "additionalProperties": False, "properties": {
            "reclaimWithinCohort": {"enum": ["Never", "LowerPriority", "Any"]},
            "withinClusterQueue": {"enum": ["Never", "LowerPriority",
                                            "LowerOrNewerEqualPriority"]},
            "borrowWithinCohort": {"type": "object", "additionalProperties": False,
                                   "properties": {
                                       "policy": {"enum": ["Never", "LowerPriority"]},
                                       "maxPriorityThreshold": {"type": "integer"}}}}},
        "stopPolicy": {"enum": ["None", "Hold", "HoldAndDrain"]}}}, namespaced=False)

LOCAL_QUEUE = _kind("LocalQueue", {
    "type": "object", "required": ["clusterQueue"], "additionalProperties": False,
    "properties": {"clusterQueue": NAME,
                   "stopPolicy": {"enum": ["None", "Hold", "HoldAndDrain"]}}}, namespaced=True)

CONDITION = {"type": "object", "required": ["type", "status"], "properties": {
    "type": {"type": "string"}, "status": {"enum": ["True", "False", "Unknown"]},
    "reason": {"type": "string"}, "message": {"type": "string"},
    "lastTransitionTime": {"type": "string"}}}

WORKLOAD = _kind("Workload", {
    "type": "object", "required": ["podSets"], "properties": {
        "podSets": {"type": "array", "minItems": 1, "maxItems": 8, "items": {
            "type": "object", "required": ["count", "template"], "properties": {
                "name": {"type": "string", "maxLength": 63, "pattern": DNS1123_LABEL},
                "count": {"type": "integer", "minimum": 0},
                "minCount": {"type": "integer", "minimum": 1},
                "template": {"type": "object"}}}},
        "queueName": {"type": "string", "maxLength": 253},
        "priorityClassName": {"type": "string"}, "priority": {"type": "integer"},
        "active": {"type": "boolean"}}},
    namespaced=True, status={"type": "object", "properties": {
        "conditions": {"type": "array", "items": CONDITION},
        "admission": {"type": "object", "required": ["clusterQueue", "podSetAssignments"],
                      "properties": {"clusterQueue": NAME,
                                     "podSetAssignments": {"type": "array"}}}}})

SCHEMAS = {"ResourceFlavor": RESOURCE_FLAVOR, "ClusterQueue": CLUSTER_QUEUE,
           "LocalQueue": LOCAL_QUEUE, "Workload": WORKLOAD}


#: Kueue 0.15 renamed flavorFungibility's `Borrow` and `Preempt` to `MayStopSearch` (the old
#: names deprecated, still accepted): v1beta1's enums take it from that release on.
MAY_STOP_SEARCH = (0, 15)


@cache
def _validator(kind: str, may_stop_search: bool) -> jsonschema.Draft202012Validator:
    schema = copy.deepcopy(SCHEMAS[kind])
    if kind == "ClusterQueue" and may_stop_search:
        fungibility = schema["properties"]["spec"]["properties"]["flavorFungibility"]
        for field in ("whenCanBorrow", "whenCanPreempt"):
            fungibility["properties"][field]["enum"].append("MayStopSearch")
    return jsonschema.Draft202012Validator(schema)


def kueue_errors(obj: dict, *, release: str | None = None) -> list[str]:
    """What is wrong with a Kueue object written as v1beta1 to Kueue `release` (None: the
    newest), as `path: message` lines (empty: valid)."""
    newer = release is None or release_minor(release) >= MAY_STOP_SEARCH
    validator = _validator(obj.get("kind", ""), newer)
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))]
