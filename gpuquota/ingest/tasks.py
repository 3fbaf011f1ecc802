"""Beat tasks of the ingestion app: partitions ahead of time, raw-data retention."""

from celery import shared_task
from django.utils import timezone

from gpuquota.ingest.partitions import partitions_create_ahead, raw_data_expire

BEAT_SCHEDULE = {
    "ingest-partitions-create-ahead": {
        "task": "ingest.partitions_create_ahead", "schedule": 3600.0},
    "ingest-raw-data-expire": {"task": "ingest.raw_data_expire", "schedule": 6 * 3600.0},
}


@shared_task(name="ingest.partitions_create_ahead", autoretry_for=(Exception,),
             retry_backoff=60, max_retries=5)
def partitions_create_ahead_task() -> int:
    """Daily partitions of the raw tables for the coming days (idempotent)."""
    return partitions_create_ahead(today=timezone.now().date())


@shared_task(name="ingest.raw_data_expire", autoretry_for=(Exception,),
             retry_backoff=300, max_retries=3)
def raw_data_expire_task() -> int:
    """Drop raw data past RAW_SAMPLE_RETENTION_DAYS (idempotent)."""
    return raw_data_expire(today=timezone.now().date())
