"""Reconciles asked by changes share one run per window with a broker (issue 34: a lending
pass that lent 1,000 GPUs queued 1,000 reconciles of every cluster)."""

import pytest
from django.core.cache import cache

from gpuquota.schedulers.services import backend_config_update, schedulers_reconcile_request

pytestmark = pytest.mark.django_db
KEY = "gpuquota:coalesce:schedulers.reconcile_all"


@pytest.fixture
def broker(site, monkeypatch):
    """The site's cluster with its backend on, and Celery as with a broker: the reconciles
    queued are recorded, not run."""
    from gpuquota.celery import app

    backend_config_update(cluster=site.cluster, actor=site.admin, mode="write")
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False
    sent = []
    monkeypatch.setattr(app.tasks["schedulers.reconcile_all"], "apply_async",
                        lambda **queued: sent.append(queued))
    cache.delete(KEY)
    yield sent
    app.conf.task_always_eager = eager
    cache.delete(KEY)


def changes(n: int, capture) -> None:
    for k in range(n):
        with capture(execute=True):  # each change its own transaction, as a lending pass
            schedulers_reconcile_request(reason=f"loan {k} lent")


def test_a_burst_of_changes_queues_one_reconcile_at_the_end_of_the_window(
        broker, django_capture_on_commit_callbacks, settings):
    settings.SCHEDULER_RECONCILE_COALESCE_S = 7
    changes(50, django_capture_on_commit_callbacks)
    assert broker == [{"kwargs": {"reason": "loan 0 lent"}, "countdown": 7}]
    cache.delete(KEY)  # the window is over: the next change queues the next run
    changes(3, django_capture_on_commit_callbacks)
    assert len(broker) == 2


def test_without_a_window_or_a_cache_every_change_queues_a_run(
        broker, django_capture_on_commit_callbacks, settings, monkeypatch):
    settings.SCHEDULER_RECONCILE_COALESCE_S = 0
    changes(3, django_capture_on_commit_callbacks)
    assert len(broker) == 3

    def down(*_args, **_kwargs):
        raise ConnectionError("redis down")

    settings.SCHEDULER_RECONCILE_COALESCE_S = 10
    monkeypatch.setattr(cache, "add", down)
    changes(2, django_capture_on_commit_callbacks)
    assert len(broker) == 5
