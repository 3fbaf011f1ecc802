"""The importer's chunks run with Python's cyclic garbage collector paused
(`core.gcpause.collector_paused`), and the collector is left as it was found."""

import gc

import pytest

from gpuquota.core.gcpause import collector_paused


@pytest.fixture
def collector():
    enabled = gc.isenabled()
    yield
    (gc.enable if enabled else gc.disable)()


def test_paused_inside_and_running_after(collector):
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_running_again_after_an_error(collector):
    gc.enable()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("a chunk failed")
    assert gc.isenabled()


def test_left_off_where_it_was_off(collector):
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
