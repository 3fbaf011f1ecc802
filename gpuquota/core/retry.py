"""How a Celery task that reads and writes PostgreSQL retries when the database is away:
with backoff and jitter, acknowledged only once done (a killed worker's task runs again;
every such task is idempotent). `@shared_task(name=..., **DB_RETRY)`."""

from django.db import DatabaseError, InterfaceError, OperationalError

DB_RETRY = {
    "autoretry_for": (OperationalError, InterfaceError, DatabaseError),
    "retry_backoff": 5,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 10,
    "acks_late": True,
}
