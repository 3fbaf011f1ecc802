"""A small Kubernetes API server on loopback, for the tests and the demo (kubernetes.md)."""

from gpuquota.schedulers.kubernetes.fake_apiserver.server import FakeApiServer, Recorded

__all__ = ["FakeApiServer", "Recorded"]
