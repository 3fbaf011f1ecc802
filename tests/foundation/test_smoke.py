import pytest

from tests.factories import make_gpu


@pytest.mark.django_db
def test_models_work(roles):
    gpu = make_gpu()
    assert gpu.class_history.count() == 1
    assert roles.team.memberships.count() == 2
