"""Queueing Celery tasks by name, so that services never import the tasks that call them
(tasks call services, never the reverse).

`task_enqueue_on_commit` queues the named task once the caller's transaction commits (at
once outside a transaction); on the embedded default (no broker, eager tasks) it runs in
process right after the commit, as `.delay` would. A failure to queue (broker down) is
logged by Django's robust on-commit hook and never undoes the commit: every task queued
this way is idempotent and has a periodic sweep that finds its work again.
"""

from django.db import transaction


def task_enqueue_on_commit(name: str, /, **kwargs) -> None:
    """Queue the task registered as `name` with `kwargs` after the current transaction."""
    transaction.on_commit(lambda: _send(name, kwargs), robust=True)


def _send(name: str, kwargs: dict) -> None:
    from gpuquota.celery import app

    app.tasks[name].apply_async(kwargs=kwargs)
