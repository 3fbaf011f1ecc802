"""Storage paths, partitions and retention; import of batch files."""

import gzip
import json
from datetime import UTC, date, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from gpuquota.ingest import partitions
from gpuquota.ingest.models import AgentBatch, ProcessRecord, Sample
from gpuquota.ingest.partitions import (
    partitions_create_ahead,
    partitions_list,
    raw_data_expire,
)
from gpuquota.ingest.storage import SAMPLES, records_store
from gpuquota.ingest.tasks import BEAT_SCHEDULE, partitions_create_ahead_task, raw_data_expire_task
from tests.factories import make_gpu
from tests.ingest.factories import (
    Agent,
    batch,
    enrolled,
    gpu_entry,
    iso,
    new_gpu_uuid,
    process,
    recent_minute,
    sample,
)

pytestmark = pytest.mark.django_db


def sample_rows(gpu_id: int, count: int, start: datetime) -> list[tuple]:
    now = timezone.now()
    return [(gpu_id, start + timedelta(minutes=i), start + timedelta(minutes=i + 1), 6,
             50.25, 99.0, 10.0, 1000, 2000, 300.5, 18030.0, 70, 4, 0, 0, 61.5, 40.0, 12.25, 30.0,
             now, None, None)
            for i in range(count)]


@pytest.mark.postgres
def test_copy_path_stores_thousands_of_rows_and_counts_duplicates():
    gpu = make_gpu()
    start = datetime(2026, 11, 20, tzinfo=UTC)
    partitions.partitions_ensure(days=[start.date() + timedelta(days=d) for d in range(5)])
    rows = sample_rows(gpu.id, 5000, start)
    first = records_store(table=SAMPLES, rows=rows)
    assert (first.stored, first.duplicates, first.conflicts) == (5000, 0, 0)
    changed = list(rows[:10])
    changed[0] = (*changed[0][:3], 5, *changed[0][4:])
    again = records_store(table=SAMPLES, rows=changed)
    assert (again.stored, again.duplicates, again.conflicts) == (0, 9, 1)
    assert Sample.objects.count() == 5000
    assert str(Sample.objects.get(gpu=gpu, window_start=start).util_gpu_avg) == "50.25"
    with connection.cursor() as cursor:  # the staging table of the COPY path
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname = 'ingest_sample_stage' "
                       "AND relpersistence = 't'")
        assert cursor.fetchone()[0] == 1


def test_simple_path_counts_like_the_copy_path():
    gpu = make_gpu()
    rows = sample_rows(gpu.id, 5, datetime(2026, 11, 20, tzinfo=UTC))
    assert records_store(table=SAMPLES, rows=rows).stored == 5
    changed = (*rows[1][:4], 1.0, *rows[1][5:])
    result = records_store(table=SAMPLES, rows=[rows[0], changed])
    assert (result.stored, result.duplicates, result.conflicts) == (0, 1, 1)


def partition_of(model, **filters) -> str:
    row = model.objects.filter(**filters).first()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {model._meta.db_table} "
                       "WHERE gpu_id = %s AND window_start = %s", [row.gpu_id, row.window_start])
        return cursor.fetchone()[0]


@pytest.mark.postgres
def test_rows_land_in_daily_partitions_created_on_demand():
    agent = Agent(enrolled().key, Client())
    gpu = new_gpu_uuid()
    old = recent_minute().replace(hour=12, minute=0) - timedelta(days=6)
    response = agent.post(batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, old)],
                                processes=[process(gpu, old)]))
    assert response.json()["samples"]["stored"] == 1
    assert partition_of(Sample) == f"ingest_sample_p{old:%Y%m%d}"
    assert partition_of(ProcessRecord) == f"ingest_processrecord_p{old:%Y%m%d}"


@pytest.mark.postgres
def test_partitions_created_ahead_and_old_ones_dropped():
    # a year before the suite's real "now": no other test leaves partitions there (their
    # partitions, unlike their rows, can outlive them)
    today = date(2025, 11, 29)
    assert partitions_create_ahead(today=today, days_ahead=3) == 10  # 5 days x 2 tables
    assert partitions_create_ahead(today=today, days_ahead=3) == 0
    days = set(partitions_list(table="ingest_sample"))
    assert {today - timedelta(days=1), today + timedelta(days=3)} <= days
    gpu = make_gpu()
    partitions.partitions_ensure(days=[date(2025, 8, 1), date(2025, 8, 31), date(2025, 9, 1)])
    records_store(table=SAMPLES, rows=sample_rows(gpu.id, 1, datetime(2025, 8, 1, tzinfo=UTC))
                  + sample_rows(gpu.id, 1, datetime(2025, 9, 1, tzinfo=UTC)))
    # 90 days before 2025-11-29 is 2025-08-31: older days go, that day stays.
    dropped = raw_data_expire(today=today, retention_days=90)
    assert dropped == 2  # 2025-08-01 of both tables
    remaining = set(partitions_list(table="ingest_sample"))
    assert date(2025, 8, 1) not in remaining and date(2025, 8, 31) in remaining
    assert list(Sample.objects.values_list("window_start", flat=True)) == [
        datetime(2025, 9, 1, tzinfo=UTC)]


@pytest.mark.postgres
def test_rows_without_a_daily_partition_wait_in_default_then_move():
    gpu = make_gpu()
    day = datetime(2025, 10, 31, 22, 0, tzinfo=UTC)  # a day no other test stores data for
    Sample.objects.bulk_create([Sample(gpu=gpu, window_start=day, window_end=day
                                       + timedelta(minutes=1), readings=6, received_at=day)])
    assert partition_of(Sample) == "ingest_sample_default"
    assert partitions.partitions_ensure(days=[day.date()]) == 2
    assert partition_of(Sample) == "ingest_sample_p20251031"
    assert Sample.objects.count() == 1
    # Retention clears the default partition too.
    Sample.objects.bulk_create([Sample(gpu=gpu, window_start=day - timedelta(days=200),
                                       window_end=day - timedelta(days=200, minutes=-1),
                                       readings=1, received_at=day)])
    raw_data_expire(today=day.date(), retention_days=90)
    assert Sample.objects.count() == 1


def test_retention_keeps_only_recent_raw_data_on_any_database():
    gpu = make_gpu()
    records_store(table=SAMPLES, rows=sample_rows(gpu.id, 1, datetime(2026, 8, 1, tzinfo=UTC))
                  + sample_rows(gpu.id, 1, datetime(2026, 9, 1, tzinfo=UTC)))
    assert raw_data_expire(today=date(2026, 11, 29), retention_days=90) >= 1
    assert list(Sample.objects.values_list("window_start", flat=True)) == [
        datetime(2026, 9, 1, tzinfo=UTC)]


def test_old_batch_receipts_are_forgotten_after_30_days():
    Agent(enrolled().key, Client()).post(batch())
    AgentBatch.objects.update(received_at=timezone.now() - timedelta(days=31))
    raw_data_expire(today=timezone.now().date())
    assert not AgentBatch.objects.exists()


def test_beat_tasks_are_declared_and_run_in_process():
    assert {e["task"] for e in BEAT_SCHEDULE.values()} == {
        "ingest.partitions_create_ahead", "ingest.raw_data_expire"}
    assert partitions_create_ahead_task() >= 0
    assert raw_data_expire_task() >= 0


def test_import_batches_from_json_and_gzip_files_without_age_bound(tmp_path):
    issued = enrolled("gpu-node-09")
    token_file = tmp_path / "token"
    token_file.write_text(issued.key + "\n")
    gpu = new_gpu_uuid()
    old = recent_minute() - timedelta(days=20)
    body = batch(gpus=[gpu_entry(gpu)], samples=[sample(gpu, old), sample(gpu, recent_minute())])
    plain = tmp_path / "a.json"
    plain.write_text(json.dumps(body))
    second = batch(samples=[sample(gpu, old + timedelta(minutes=1))])
    zipped = tmp_path / "b.json.gz"
    zipped.write_bytes(gzip.compress(json.dumps(second).encode()))
    out = StringIO()
    call_command("import_batches", str(plain), str(zipped), "--node-token-file",
                 str(token_file), stdout=out)
    assert Sample.objects.count() == 3
    assert "imported" in out.getvalue()
    out = StringIO()
    call_command("import_batches", str(plain), "--cluster", issued.node.cluster.slug,
                 "--hostname", "gpu-node-09", stdout=out)
    assert "already imported" in out.getvalue()


def test_import_batches_reports_refused_files(tmp_path):
    issued = enrolled()
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "batch_id": "x"}')
    with pytest.raises(CommandError, match="1 of 1"):
        call_command("import_batches", str(bad), "--cluster", issued.node.cluster.slug,
                     "--hostname", issued.node.hostname, stderr=StringIO())
    with pytest.raises(CommandError):
        call_command("import_batches", str(bad), "--cluster", "nope", "--hostname", "x")


def test_import_keeps_the_other_window_rules(tmp_path):
    issued = enrolled()
    gpu = new_gpu_uuid()
    future = timezone.now() + timedelta(hours=1)
    record = sample(gpu, future)
    record["window_start"] = iso(future)
    path = tmp_path / "future.json"
    path.write_text(json.dumps(batch(gpus=[gpu_entry(gpu)], samples=[record])))
    call_command("import_batches", str(path), "--cluster", issued.node.cluster.slug,
                 "--hostname", issued.node.hostname, stdout=StringIO())
    assert not Sample.objects.exists()
