"""The Kubernetes API through the official client, for the kinds the backend manages:
list, create, merge-patch (with a resourceVersion precondition) and delete; every refusal
becomes a BackendError that says what to do."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from gpuquota.schedulers.backend import BackendError

MANAGED_SELECTOR = "app.kubernetes.io/managed-by=gpuquota"
RBAC_FILE = "deploy/kubernetes/base/rbac.yaml"
KUEUE_RBAC_FILE = "deploy/kubernetes/kueue/rbac.yaml"


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    rbac_file: str = RBAC_FILE  # where the shipped manifests grant the calls on it
    #: Older versions that serve the same object where `version` is not served yet, newest
    #: first (capabilities pick the one the cluster serves).
    older: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


KINDS = {k.kind: k for k in (
    Kind("ResourceFlavor", "kueue.x-k8s.io", "v1beta1", "resourceflavors", False),
    Kind("ClusterQueue", "kueue.x-k8s.io", "v1beta1", "clusterqueues", False),
    Kind("LocalQueue", "kueue.x-k8s.io", "v1beta1", "localqueues", True),
    Kind("ValidatingAdmissionPolicy", "admissionregistration.k8s.io", "v1",
         "validatingadmissionpolicies", False),
    Kind("ValidatingAdmissionPolicyBinding", "admissionregistration.k8s.io", "v1",
         "validatingadmissionpolicybindings", False),
    Kind("ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates", True),
    # v1 from Kubernetes 1.37; v1beta2 in 1.36; v1alpha3 in 1.33 to 1.35 (alpha: only with
    # the DRADeviceTaints feature gate and --runtime-config=resource.k8s.io/v1alpha3=true).
    Kind("DeviceTaintRule", "resource.k8s.io", "v1", "devicetaintrules", False,
         older=("v1beta2", "v1alpha3")),
    # v1 from Kubernetes 1.34, v1beta2 from 1.33, v1beta1 from 1.32 (slices.py reads each).
    Kind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", False,
         older=("v1beta2", "v1beta1")),
    Kind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", True,
         older=("v1beta2", "v1beta1")),
    Kind("Workload", "kueue.x-k8s.io", "v1beta1", "workloads", True),
    # Read only, one object: Kueue's controller, for its release (capabilities).
    Kind("Deployment", "apps", "v1", "deployments", True, rbac_file=KUEUE_RBAC_FILE),
)}


def api_client(*, api_url: str, token: str, timeout_s: int,
               ca_file: str = "") -> k8s.ApiClient:
    """A client for `api_url` with a bearer token (and the API server's CA, if private);
    with no URL, the pod's ServiceAccount."""
    configuration = k8s.Configuration()
    if api_url:
        configuration.host = api_url.rstrip("/")
        configuration.api_key = {"authorization": f"Bearer {token}"} if token else {}
        if ca_file:
            configuration.ssl_ca_cert = ca_file
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException as exc:
            raise BackendError("No API URL is configured and this process does not run in a "
                               "pod with a ServiceAccount.", detail=str(exc)) from None
    configuration.retries = False
    api = k8s.ApiClient(configuration)
    api.timeout_s = timeout_s
    return api


def _refusal(exc: ApiException, what: str, rbac_file: str = RBAC_FILE) -> BackendError:
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        body = {}
    message = body.get("message") or exc.reason or ""
    causes = "; ".join(c.get("message", "") for c in body.get("details", {}).get("causes", []))
    if exc.status == 403:
        return BackendError(f"The Kubernetes API refused to {what} (RBAC): the reconciler's "
                            f"ServiceAccount needs the rules of {rbac_file}.", detail=message)
    if exc.status == 401:
        return BackendError("The Kubernetes API did not accept the token.", detail=message)
    if exc.status == 409:
        return BackendError(f"Could not {what}: it changed on the cluster meanwhile "
                            "(resourceVersion); the next reconcile retries.", detail=message)
    if exc.status == 404 and 'namespaces "' in message:
        return BackendError(f"Could not {what}: {message} on the cluster (create the namespace, "
                            "or end its mapping to the team in gpuquota).", detail=message)
    if exc.status == 422:
        return BackendError(f"The Kubernetes API refused to {what} as invalid: {causes}",
                            detail=message)
    return BackendError(f"The Kubernetes API answered {exc.status} to {what}.", detail=message)


class Api:
    """The calls the backend makes; `rbac_verbs` lists them on the kinds it manages (checked
    against the shipped ClusterRole by the tests). `get` reads one object only, Kueue's
    controller Deployment, granted by a Role in Kueue's namespace (KUEUE_RBAC_FILE)."""

    rbac_verbs = ("list", "create", "patch", "delete")

    def __init__(self, api: k8s.ApiClient):
        self.api = api
        self.custom = k8s.CustomObjectsApi(api)
        self.timeout = api.timeout_s
        self._versions: dict[str, str] = {}
        self.discovered: set[str] = set()  # the kinds whose served version was discovered
        self._groups: dict[str, list[str]] | None = None
        self._resources: dict[tuple[str, str], set[str]] = {}

    def kind(self, name: str) -> Kind:
        """`KINDS[name]` in the version this cluster serves it in (`use`)."""
        kind = KINDS[name]
        version = self._versions.get(name, kind.version)
        return kind if version == kind.version else replace(kind, version=version)

    def use(self, name: str, version: str) -> None:
        """Talk to kind `name` in `version` from now on (one the cluster serves)."""
        self._versions[name] = version

    def _call(self, what: str, fn, *args, rbac_file: str = RBAC_FILE, **kwargs):
        try:
            return fn(*args, _request_timeout=self.timeout, **kwargs)
        except ApiException as exc:
            raise _refusal(exc, what, rbac_file) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendError(f"Cannot reach the Kubernetes API at {self.api.configuration.host}.",
                               detail=str(exc)) from None

    def version(self) -> str:
        return self._call("read the version", k8s.VersionApi(self.api).get_code).git_version

    def groups(self) -> dict[str, list[str]]:
        """The API groups and their versions (discovery, read once per Api: one pass)."""
        if self._groups is None:
            found = self._call("discover the API groups",
                               k8s.ApisApi(self.api).get_api_versions)
            self._groups = {g.name: [v.version for v in g.versions] for g in found.groups}
        return self._groups

    def resources(self, group: str, version: str) -> set[str]:
        """The resources (plurals) `group/version` serves; empty when it is not served.
        Discovery: every authenticated client may read it (system:discovery); read once per
        Api."""
        def read():
            try:
                return self.api.call_api(f"/apis/{group}/{version}", "GET",
                                         response_types_map={200: "object"},
                                         auth_settings=["BearerToken"],
                                         _return_http_data_only=True,
                                         _request_timeout=self.timeout)
            except ApiException as exc:
                if exc.status == 404:
                    return {}
                raise

        if (group, version) not in self._resources:
            found = self._call(f"discover {group}/{version}", lambda **_: read())
            self._resources[group, version] = {
                r.get("name", "") for r in (found or {}).get("resources", [])}
        return self._resources[group, version]

    def list(self, kind: Kind, selector: str = MANAGED_SELECTOR, *, fields: str = "",
             limit: int = 0) -> list[dict]:
        """Every object of `kind` (in every namespace) matching `selector` and the field
        selector `fields`; with `limit`, the first page of at most that many (enough to tell
        whether there is one)."""
        extra = {"field_selector": fields} if fields else {}
        if limit:
            extra["limit"] = limit
        found = self._call(f"list {kind.plural}", self.custom.list_cluster_custom_object,
                           kind.group, kind.version, kind.plural, label_selector=selector,
                           **extra)
        return found.get("items", [])

    def get(self, kind: Kind, name: str, namespace: str) -> dict | None:
        """One namespaced object, or None when there is none (404)."""
        def read(**kwargs):
            try:
                return self.custom.get_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name, **kwargs)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise

        return self._call(f"get {kind.kind} {namespace}/{name}", read,
                          rbac_file=kind.rbac_file)

    def create(self, kind: Kind, obj: dict) -> None:
        what = f"create {kind.kind} {obj['metadata']['name']}"
        if kind.namespaced:
            self._call(what, self.custom.create_namespaced_custom_object, kind.group,
                       kind.version, obj["metadata"]["namespace"], kind.plural, obj)
        else:
            self._call(what, self.custom.create_cluster_custom_object, kind.group,
                       kind.version, kind.plural, obj)

    def patch(self, kind: Kind, name: str, namespace: str, patch: dict) -> None:
        what = f"patch {kind.kind} {name}"
        if kind.namespaced:
            self._call(what, self.custom.patch_namespaced_custom_object, kind.group,
                       kind.version, namespace, kind.plural, name, patch)
        else:
            self._call(what, self.custom.patch_cluster_custom_object, kind.group,
                       kind.version, kind.plural, name, patch)

    def node_find(self, name: str) -> dict | None:
        """One Node as plain JSON (listed by name: the ClusterRole grants no `get`)."""
        core = k8s.CoreV1Api(self.api)
        found = self._call(f"list node {name}", core.list_node,
                           field_selector=f"metadata.name={name}")
        items = self.api.sanitize_for_serialization(found).get("items", [])
        return next((n for n in items if n["metadata"]["name"] == name), None)

    def nodes_list(self) -> list[dict]:
        """Every Node as plain JSON (one LIST: drain_progress.py)."""
        def call(**extra):
            answer = k8s.CoreV1Api(self.api).list_node(_preload_content=False, **extra)
            return json.loads(answer.data or b"{}")

        return self._call("list nodes", call).get("items") or []

    def node_patch(self, name: str, patch: dict) -> None:
        self._call(f"patch node {name}", k8s.CoreV1Api(self.api).patch_node, name, patch)

    def delete(self, kind: Kind, name: str, namespace: str) -> None:
        what = f"delete {kind.kind} {name}"
        if kind.namespaced:
            self._call(what, self.custom.delete_namespaced_custom_object, kind.group,
                       kind.version, namespace, kind.plural, name)
        else:
            self._call(what, self.custom.delete_cluster_custom_object, kind.group,
                       kind.version, kind.plural, name)

    # Pods and batch Jobs as plain JSON, for stopping a zero-use pod (jobstop.py); found by
    # listing by name in their namespace (the ClusterRole grants no `get`).
    def _find(self, what: str, fn, name: str, namespace: str) -> dict | None:
        def call(**extra):
            answer = fn(namespace, field_selector=f"metadata.name={name}",
                        _preload_content=False, **extra)
            return json.loads(answer.data or b"{}")

        items = self._call(what, call).get("items") or []
        return next((o for o in items if o["metadata"]["name"] == name), None)

    def pods_list(self) -> list[dict]:
        """Every pod of the cluster, as plain JSON (evictions.py)."""
        def call(**extra):
            answer = k8s.CoreV1Api(self.api).list_pod_for_all_namespaces(
                _preload_content=False, **extra)
            return json.loads(answer.data or b"{}")

        return self._call("list pods", call).get("items") or []

    def pod_find(self, name: str, namespace: str) -> dict | None:
        return self._find(f"list pod {namespace}/{name}",
                          k8s.CoreV1Api(self.api).list_namespaced_pod, name, namespace)

    def pod_delete(self, name: str, namespace: str, uid: str) -> None:
        """Delete the pod whose uid is `uid` (a newer pod of the same name is left)."""
        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid))
        self._call(f"delete pod {namespace}/{name}",
                   k8s.CoreV1Api(self.api).delete_namespaced_pod, name, namespace,
                   body=options, _preload_content=False)

    def batch_job_find(self, name: str, namespace: str) -> dict | None:
        return self._find(f"list Job {namespace}/{name}",
                          k8s.BatchV1Api(self.api).list_namespaced_job, name, namespace)

    def batch_job_patch(self, name: str, namespace: str, patch: dict) -> None:
        self._call(f"patch Job {namespace}/{name}",
                   k8s.BatchV1Api(self.api).patch_namespaced_job, name, namespace, patch,
                   _preload_content=False)
