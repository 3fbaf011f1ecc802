import pytest

from tests.reservations.factories import Fleet


@pytest.fixture
def fleet():
    return Fleet.create()
