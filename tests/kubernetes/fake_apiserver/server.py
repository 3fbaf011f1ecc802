"""The fake API server: serves the API versions of the Kubernetes and Kueue releases it claims
(resources.py, kueue_api.py), stores each object as that release stores it and converts it to
the version asked for, enforces resourceVersion (409 on a stale write), validates writes
(422), answers 404 and 403 (from RBAC rules, e.g. the shipped ClusterRole) as the real one
does, and records every request. Plain HTTP on 127.0.0.1."""

from __future__ import annotations

import copy
import itertools
import json
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from gpuquota.schedulers.kubernetes.kueue_release import image_tag
from tests.kubernetes.fake_apiserver import dra
from tests.kubernetes.fake_apiserver.kueue_api import GROUP as KUEUE_GROUP
from tests.kubernetes.fake_apiserver.kueue_api import KueueApi
from tests.kubernetes.fake_apiserver.resources import (
    KUEUE_IMAGE,
    Resource,
    kueue_controller,
    served_resources,
    validation_errors,
)

SERVICE_ACCOUNT = "system:serviceaccount:gpuquota:gpuquota-reconciler"
VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


@dataclass(frozen=True)
class Recorded:
    """One request as received: method, path, query, content type and JSON body."""

    method: str
    path: str
    query: str
    content_type: str
    body: object


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, causes: list[str] = ()):
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, list(causes)

    def status(self) -> dict:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.causes:
            body["details"] = {"causes": [{"message": c} for c in self.causes]}
        return body


def merge_patch(target: object, patch: object) -> object:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _selected(obj: dict, selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if (eq and labels.get(key) != value) or (not eq and key not in labels):
            return False
    return True


#: The field selectors the real API server accepts per kind (besides metadata.name and
#: metadata.namespace, which every kind has); any other is a 400, as there.
FIELD_SELECTORS = {"ResourceSlice": ("spec.driver", "spec.nodeName"),
                   "Pod": ("spec.nodeName", "status.phase"),
                   "Node": ("spec.unschedulable",)}


def _fields_selected(resource, obj: dict, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        path, _, value = term.partition("=")
        allowed = ("metadata.name", "metadata.namespace", *FIELD_SELECTORS.get(resource.kind, ()))
        if path not in allowed:
            raise ApiError(400, "BadRequest", f'"{path}" is not a known field selector: only '
                           f'"{", ".join(allowed)}"')
        found = obj
        for part in path.split("."):
            found = (found or {}).get(part) if isinstance(found, dict) else None
        if (found or "") != value:
            return False
    return True


def _page(items: list, meta: dict, asked: dict) -> tuple[list, dict]:
    """`limit` and `continue` as the API server pages a LIST (the token: the next offset)."""
    start = int(asked.get("continue", ["0"])[0] or 0)
    limit = int(asked.get("limit", ["0"])[0] or 0)
    if not limit:
        return items[start:], meta
    page = items[start:start + limit]
    if start + limit < len(items):
        meta = {**meta, "continue": str(start + limit),
                "remainingItemCount": len(items) - start - limit}
    return page, meta


class FakeApiServer:
    """Start with `start()`; `url`, `token`, `requests`. `version` is the Kubernetes release it
    claims (the API versions it serves follow it; `runtime_config` turns alpha ones on, e.g.
    {"resource.k8s.io/v1alpha3"}). `rbac_rules` (a ClusterRole's rules) and `rbac_roles` (a
    Role's rules per namespace, e.g. the shipped ones) limit what the token may do; None for
    both allows everything. `groups` limits which API groups are served (a cluster without
    Kueue, without DRA). Kueue's controller Deployment runs `kueue_image` (None: no
    Deployment), and Kueue's API behaves as `kueue_release` (default: the image's tag).
    `namespaces`: the namespaces that exist (None: any)."""

    def __init__(self, *, token: str = "fake-token", version: str = "v1.34.2",
                 rbac_rules: list[dict] | None = None,
                 rbac_roles: dict[str, list[dict]] | None = None,
                 groups: set[str] | None = None, kueue_image: str | None = KUEUE_IMAGE,
                 kueue_release: str | None = None, runtime_config: set[str] = frozenset(),
                 namespaces: set[str] | None = None):
        self.token, self.version = token, version
        self.rbac_rules, self.rbac_roles = rbac_rules, rbac_roles
        self.namespaces = namespaces
        self.kueue = KueueApi(kueue_release or image_tag(kueue_image or KUEUE_IMAGE))
        self.resources = served_resources(release=version, kueue=self.kueue, groups=groups,
                                          runtime_config=frozenset(runtime_config))
        self.objects: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self._rv = itertools.count(1000)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        daemon=True)
        if kueue_image and self.serves(KUEUE_GROUP):
            self.put(kueue_controller(image=kueue_image))

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def serves(self, group: str, kind: str | None = None) -> tuple[str, ...]:
        """The versions in which `group` (`kind` of it) is served; () for none."""
        versions: list[str] = []
        for r in self.resources:
            if r.group == group and kind in (None, r.kind):
                versions += [v for v in r.versions if v not in versions]
        return tuple(versions)

    # What tests (and the demo) do behind the reconciler's back.
    def put(self, obj: dict) -> dict:
        """Store `obj` as a person or a controller would (no RBAC, no validation)."""
        resource = self._resource_for(obj["kind"])
        with self.lock:
            return self._store(resource, copy.deepcopy(obj))

    def get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        """The object as the server stores it (its storage version)."""
        resource = self._resource_for(kind)
        stored = self.objects.get((resource.group, resource.plural), {}).get((namespace, name))
        return copy.deepcopy(stored) if stored else None

    def items(self, kind: str) -> list[dict]:
        resource = self._resource_for(kind)
        return [copy.deepcopy(o) for _, o in sorted(
            self.objects.get((resource.group, resource.plural), {}).items())]

    def remove(self, kind: str, name: str, namespace: str = "") -> None:
        resource = self._resource_for(kind)
        self.objects.get((resource.group, resource.plural), {}).pop((namespace, name), None)

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method != "GET"]

    def _resource_for(self, kind: str) -> Resource:
        return next(r for r in self.resources if r.kind == kind)

    def _stored_form(self, resource: Resource, obj: dict) -> dict:
        if resource.group == KUEUE_GROUP:
            return self.kueue.to_storage(obj)
        if resource.kind == "ResourceSlice":
            obj = dra.slice_as(obj, resource.storage_version)
        return {**obj, "apiVersion": resource.api_version()}

    def _present(self, resource: Resource, obj: dict, version: str) -> dict:
        if resource.group == KUEUE_GROUP:
            return self.kueue.present(obj, version)
        if resource.kind == "ResourceSlice":
            obj = dra.slice_as(obj, version)
        return {**copy.deepcopy(obj), "apiVersion": resource.api_version(version)}

    def _store(self, resource: Resource, obj: dict) -> dict:
        obj = self._stored_form(resource, obj)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta["generation"] = meta.get("generation", 0) + 1
        key = (meta.get("namespace", "") if resource.namespaced else "", meta["name"])
        self.objects.setdefault((resource.group, resource.plural), {})[key] = obj
        return copy.deepcopy(obj)

    def _allowed(self, resource: Resource, verb: str, namespace: str, name: str) -> bool:
        if self.rbac_rules is None and self.rbac_roles is None:
            return True
        rules = list(self.rbac_rules or []) + list((self.rbac_roles or {}).get(namespace, []))
        return any(resource.group in rule.get("apiGroups", []) and resource.plural in
                   rule.get("resources", []) and verb in rule.get("verbs", [])
                   and (not rule.get("resourceNames") or name in rule["resourceNames"])
                   for rule in rules)

    def _route(self, path: str) -> tuple[Resource, str, str, str]:
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural, name = rest[0], (rest[1] if len(rest) > 1 else "")
        for resource in self.resources:
            if (resource.group, resource.plural) == (group, plural) and \
                    version in resource.versions:
                return resource, version, namespace, name
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def handle(self, method: str, path: str, query: str, body: object) -> tuple[int, dict]:
        path = path.rstrip("/")
        if path == "/version":
            major, minor = self.version.lstrip("v").split(".")[:2]
            return 200, {"major": major, "minor": minor, "gitVersion": self.version,
                         "gitCommit": "0" * 40, "gitTreeState": "clean",
                         "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
                         "compiler": "gc", "platform": "linux/amd64"}
        if path == "/apis":
            return 200, self._discovery()
        parts = path.strip("/").split("/")
        if method == "GET" and parts[0] == "apis" and len(parts) == 3:
            return 200, self._resource_list(parts[1], parts[2])
        resource, version, namespace, name = self._route(path)
        verb = VERBS.get(method) or ("get" if name else "list")
        if not self._allowed(resource, verb, namespace, name):
            scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            raise ApiError(403, "Forbidden", (
                f'{resource.plural}.{resource.group or "core"}'
                + (f' "{name}"' if name else "") + ' is forbidden: User '
                f'"{SERVICE_ACCOUNT}" cannot {verb} resource "{resource.plural}" in API group '
                f'"{resource.group}" {scope}'))
        with self.lock:
            dra.settle(self)
            answer = self._serve(resource, version, namespace, name, method, query, body)
            if resource.kind == "DeviceTaintRule" and method not in ("GET", "DELETE"):
                dra.taints_evict(self, rule=answer[1])
            return answer

    def _serve(self, resource, version, namespace, name, method, query, body):
        bucket = self.objects.setdefault((resource.group, resource.plural), {})
        if method == "GET" and not name:
            asked = parse_qs(query)
            selector = asked.get("labelSelector", [""])[0]
            fields = asked.get("fieldSelector", [""])[0]
            items = [self._present(resource, o, version) for (ns, _), o in sorted(bucket.items())
                     if (not namespace or ns == namespace) and _selected(o, selector)
                     and _fields_selected(resource, o, fields)]
            meta = {"resourceVersion": str(next(self._rv))}
            items, meta = _page(items, meta, asked)
            return 200, {"apiVersion": resource.api_version(version),
                         "kind": f"{resource.kind}List", "metadata": meta, "items": items}
        if method == "POST":
            return self._create(resource, version, namespace, body, bucket)
        key = (namespace, name)
        current = bucket.get(key)
        if current is None:
            raise ApiError(404, "NotFound", f'{resource.plural}.{resource.group} "{name}" '
                                            "not found")
        if method == "GET":
            return 200, self._present(resource, current, version)
        if method == "DELETE":
            del bucket[key]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        wanted_rv = (body or {}).get("metadata", {}).get("resourceVersion")
        if wanted_rv is not None and wanted_rv != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", (
                f'Operation cannot be fulfilled on {resource.plural}.{resource.group} "{name}": '
                "the object has been modified; please apply your changes to the latest version "
                "and try again"))
        seen = self._present(resource, current, version)
        updated = merge_patch(seen, body) if method == "PATCH" else copy.deepcopy(body)
        updated["metadata"] = {**current["metadata"], **updated.get("metadata", {})}
        errors = validation_errors(resource, version, updated, release=self.version,
                                   kueue=self.kueue)
        if errors:
            raise ApiError(422, "Invalid", f'{resource.kind} "{name}" is invalid', errors)
        return 200, self._present(resource, self._store(resource, updated), version)

    def _create(self, resource, version, namespace, body, bucket) -> tuple[int, dict]:
        obj = copy.deepcopy(body) if isinstance(body, dict) else {}
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            meta["namespace"] = namespace
            if self.namespaces is not None and namespace not in self.namespaces:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        errors = validation_errors(resource, version, obj, release=self.version,
                                   kueue=self.kueue)
        if errors:
            raise ApiError(422, "Invalid",
                           f'{resource.kind} "{meta.get("name", "")}" is invalid', errors)
        if (namespace, meta["name"]) in bucket:
            raise ApiError(409, "AlreadyExists",
                           f'{resource.plural}.{resource.group} "{meta["name"]}" already exists')
        return 201, self._present(resource, self._store(resource, obj), version)

    def _discovery(self) -> dict:
        groups: dict[str, list[str]] = {}
        for r in self.resources:
            if r.group:
                groups.setdefault(r.group, [])
                groups[r.group] += [v for v in r.versions if v not in groups[r.group]]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
             "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
            for g, vs in sorted(groups.items())]}

    def _resource_list(self, group: str, version: str) -> dict:
        found = [r for r in self.resources if r.group == group and version in r.versions]
        if not found:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}", "resources": [
                    {"name": r.plural, "singularName": r.kind.lower(), "kind": r.kind,
                     "namespaced": r.namespaced,
                     "verbs": ["create", "delete", "get", "list", "patch", "update"]}
                    for r in found]}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # the tests read `requests`, not stderr
                pass

            def _answer(self, code: int, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _any(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                server.requests.append(Recorded(self.command, split.path, split.query,
                                                self.headers.get("Content-Type", ""), body))
                if self.headers.get("Authorization") != f"Bearer {server.token}":
                    self._answer(401, ApiError(401, "Unauthorized", "Unauthorized").status())
                    return
                try:
                    self._answer(*server.handle(self.command, split.path, split.query, body))
                except ApiError as exc:
                    self._answer(exc.code, exc.status())

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        return Handler
