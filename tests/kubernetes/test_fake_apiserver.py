"""The fake API server answers as the real one does, seen through the official client:
404 for a missing object, 409 AlreadyExists, 401 without the token, label selectors."""

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.kubernetes.fake_apiserver import FakeApiServer

pytestmark = pytest.mark.kubernetes
FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
          "metadata": {"name": "gq-l4", "labels": {"app.kubernetes.io/managed-by": "gpuquota"}},
          "spec": {"nodeLabels": {"gpuquota.io/gpu-class": "l4"}}}


@pytest.fixture
def api():
    server = FakeApiServer(token="t").start()
    configuration = k8s.Configuration(host=server.url)
    configuration.api_key = {"authorization": "Bearer t"}
    yield server, k8s.CustomObjectsApi(k8s.ApiClient(configuration))
    server.stop()


def test_create_list_get_and_the_refusals(api):
    server, custom = api
    args = ("kueue.x-k8s.io", "v1beta1", "resourceflavors")
    created = custom.create_cluster_custom_object(*args, FLAVOR)
    assert created["metadata"]["resourceVersion"] and created["metadata"]["uid"]
    with pytest.raises(ApiException) as exists:
        custom.create_cluster_custom_object(*args, FLAVOR)
    assert exists.value.status == 409 and "AlreadyExists" in exists.value.body
    with pytest.raises(ApiException) as missing:
        custom.get_cluster_custom_object(*args, "gq-h100")
    assert missing.value.status == 404
    assert [o["metadata"]["name"] for o in custom.list_cluster_custom_object(
        *args, label_selector="app.kubernetes.io/managed-by=gpuquota")["items"]] == ["gq-l4"]
    assert custom.list_cluster_custom_object(*args, label_selector="team=x")["items"] == []
    with pytest.raises(ApiException) as invalid:
        custom.create_cluster_custom_object(*args, {**FLAVOR, "metadata": {"name": "L4"}})
    assert invalid.value.status == 422 and "metadata.name" in invalid.value.body
    assert [(r.method, r.path) for r in server.writes()] == [
        ("POST", "/apis/kueue.x-k8s.io/v1beta1/resourceflavors")] * 3


def test_no_token_no_answer(api):
    server, _ = api
    anonymous = k8s.CustomObjectsApi(k8s.ApiClient(k8s.Configuration(host=server.url)))
    with pytest.raises(ApiException) as refused:
        anonymous.list_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "resourceflavors")
    assert refused.value.status == 401
