"""Beat tasks of the core app: expired idempotency keys."""

from celery import shared_task

from gpuquota.core.idempotency import idempotency_keys_expire

BEAT_SCHEDULE = {
    "core-idempotency-keys-expire": {"task": "core.idempotency_keys_expire",
                                     "schedule": 3600.0},
}


@shared_task(name="core.idempotency_keys_expire", autoretry_for=(Exception,),
             retry_backoff=60, max_retries=3)
def idempotency_keys_expire_task() -> int:
    """Delete the Idempotency-Keys and form tokens past IDEMPOTENCY_KEY_TTL_S (idempotent)."""
    return idempotency_keys_expire()
