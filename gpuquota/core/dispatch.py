"""Queueing Celery tasks by name, so that services never import the tasks that call them
(tasks call services, never the reverse).

`task_enqueue_on_commit` queues the named task once the caller's transaction commits (at
once outside a transaction). A failure to queue (broker down) is logged by Django's robust
on-commit hook and never undoes the commit: every task queued this way is idempotent and
has a periodic sweep that finds its work again.

On the embedded default (no broker: Celery runs tasks eagerly, in process) a task queued
while a web request is served runs on the process's one task thread, not in the request:
a response never waits for an SMTP server or a statement's PDF, and neither does the next
request on the same keep-alive connection (the page a redirect leads to). Requests mark
themselves with `TasksAfterResponseMiddleware`. Anywhere else (the in-process beat, a
management command, a task queueing another) the task runs in the caller's thread right
after the commit, as `.delay` would.
"""

import contextvars
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait

from django.db import connections, transaction

logger = logging.getLogger(__name__)

_serving_request = contextvars.ContextVar("gpuquota_serving_request", default=False)
# One thread, so tasks run one at a time in the order queued (SQLite has one writer); the
# interpreter waits for it at exit, so a stopped server finishes the mail it accepted.
_task_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuquota-tasks")
_queued: set[Future] = set()
_queued_lock = threading.Lock()


def task_enqueue_on_commit(name: str, /, **kwargs) -> None:
    """Queue the task registered as `name` with `kwargs` after the current transaction."""
    transaction.on_commit(lambda: _send(name, kwargs), robust=True)


def task_enqueue_on_commit_coalesced(name: str, /, *, window_s: float, **kwargs) -> None:
    """`task_enqueue_on_commit` for a task whose every run reads the whole current state (a
    reconcile): with a broker, the first request queues the task to run `window_s` after it
    and the requests of the next `window_s` ride on that run (a cache key held for the
    window), so a pass that changes 1,000 loans queues one run, not 1,000. Each request's
    commit precedes its attempt to queue, and the run starts no earlier than the key's
    expiry, so it sees every change it stood for. On the embedded default (no broker), with
    `window_s` 0, or when the cache cannot answer, the task is queued at each commit."""
    transaction.on_commit(lambda: _send_coalesced(name, window_s, kwargs), robust=True)


def _send_coalesced(name: str, window_s: float, kwargs: dict) -> None:
    from django.core.cache import cache

    from gpuquota.celery import app

    if app.conf.task_always_eager or window_s <= 0:
        _send(name, kwargs)
        return
    try:
        first = cache.add(f"gpuquota:coalesce:{name}", 1, timeout=window_s)
    except Exception:  # the cache is down: one run per request, as without coalescing
        logger.warning("cache unavailable: %s queued without coalescing", name, exc_info=True)
        first = True
    if first:
        app.tasks[name].apply_async(kwargs=kwargs, countdown=window_s)


def tasks_after_response_wait(timeout_s: float | None = None) -> bool:
    """Wait until every task handed to the task thread has run; False if `timeout_s`
    passed first."""
    with _queued_lock:
        queued = set(_queued)
    _done, not_done = wait(queued, timeout=timeout_s)
    return not not_done


class TasksAfterResponseMiddleware:
    """Marks the request being served: tasks it queues on the embedded default run after
    its response, on the task thread."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _serving_request.set(True)
        try:
            return self.get_response(request)
        finally:
            _serving_request.reset(token)


def _send(name: str, kwargs: dict) -> None:
    from gpuquota.celery import app

    task = app.tasks[name]
    if app.conf.task_always_eager and _serving_request.get():
        future = _task_thread.submit(_run_on_task_thread, task, kwargs)
        with _queued_lock:
            _queued.add(future)
        future.add_done_callback(_forget)
    else:
        task.apply_async(kwargs=kwargs)


def _run_on_task_thread(task, kwargs: dict) -> None:
    try:
        task.apply_async(kwargs=kwargs)
    except Exception:  # as a worker would: logged; the task's sweep finds the work again
        logger.exception("task %s %s failed", task.name, kwargs)
    finally:
        connections.close_all()  # this thread's own: a request's are closed by Django


def _forget(future: Future) -> None:
    with _queued_lock:
        _queued.discard(future)
