import pytest

from gpuquota.ingest import partitions


@pytest.fixture(autouse=True)
def _forget_partitions():
    """Test transactions roll partitions back: never trust another test's cache."""
    partitions._known.clear()
    yield
    partitions._known.clear()
