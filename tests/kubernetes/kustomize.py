"""`kubectl kustomize` for the fields deploy/kubernetes uses, so the manifests are rendered
and validated where kubectl is not installed; any other field is refused, and where kubectl
is installed the tests check that both render the same objects."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KNOWN = {"apiVersion", "kind", "namespace", "labels", "resources", "images", "replicas",
         "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def _json_patch(obj: dict, operations: list[dict]) -> None:
    for op in operations:
        if op["op"] not in ("add", "replace"):
            raise ValueError(f"unsupported patch op {op['op']}")
        *parents, last = [p for p in op["path"].split("/")[1:]]
        target: Any = obj
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = op["value"]
        else:
            target[last] = op["value"]


def _images(obj: dict, images: list[dict]) -> None:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        name, _, tag = container["image"].partition(":")
        for image in images:
            if image["name"] == name:
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


def render(folder: Path) -> list[dict]:
    """The objects the kustomization in `folder` renders."""
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(spec) - KNOWN
    if unknown:
        raise ValueError(f"{folder}: kustomization fields this renderer does not know: {unknown}")
    objects: list[dict] = []
    for resource in spec.get("resources", []):
        path = folder / resource
        if path.is_dir():
            objects += render(path)
        else:
            objects += [o for o in yaml.safe_load_all(path.read_text()) if o]
    objects = copy.deepcopy(objects)
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if spec.get("namespace") and obj["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = spec["namespace"]
        for subject in obj.get("subjects", []):
            if spec.get("namespace") and subject.get("kind") == "ServiceAccount":
                subject["namespace"] = spec["namespace"]
        for label in spec.get("labels", []):
            if set(label) != {"pairs"}:
                raise ValueError(f"{folder}: only plain label pairs are rendered")
            meta.setdefault("labels", {}).update(label["pairs"])
        _images(obj, spec.get("images", []))
        for replicas in spec.get("replicas", []):
            if obj["kind"] == "Deployment" and meta["name"] == replicas["name"]:
                obj["spec"]["replicas"] = replicas["count"]
        for patch in spec.get("patches", []):
            target = patch["target"]
            if obj["kind"] == target["kind"] and meta["name"] == target["name"]:
                _json_patch(obj, yaml.safe_load((folder / patch["path"]).read_text()))
    return objects
