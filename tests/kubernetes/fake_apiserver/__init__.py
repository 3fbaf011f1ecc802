"""A small Kubernetes API server on loopback, for the tests and the demo (kubernetes.md).
Test scaffolding: it lives in the tests' tree, never in the product package."""

from tests.kubernetes.fake_apiserver.server import FakeApiServer, Recorded

__all__ = ["FakeApiServer", "Recorded"]
