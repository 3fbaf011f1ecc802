"""Telemetry sources: created, changed and deleted by admins (audited, the secret never
recorded), and pulled on their interval (`source_pull`)."""

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from gpuquota.core.errors import DomainError
from gpuquota.core.services import audit_record
from gpuquota.inventory.models import Cluster
from gpuquota.schedulers.models import BackendConfig, ImportCursor
from gpuquota.telemetry import conf, exposition
from gpuquota.telemetry.errors import SourceError
from gpuquota.telemetry.http import body_get, session_for, url_shown
from gpuquota.telemetry.importer import ImportResult, aligned, range_import
from gpuquota.telemetry.models import AuthKind, ScrapedReading, SourceKind, TelemetrySource
from gpuquota.telemetry.netguard import url_refusal
from gpuquota.telemetry.prometheus import selector_valid
from gpuquota.telemetry.secrets import secret_seal

logger = logging.getLogger(__name__)

AUDITED = ("name", "cluster_id", "kind", "enabled", "urls", "base_url", "selector", "auth",
           "username", "tls_verify", "ca_bundle", "node_label", "interval_s",
           "scrape_interval_s", "window_s", "delay_s")
FIRST_PULL_S = 3600  # a new source's first pull reaches back this far; older: the back-fill


def _check(source: TelemetrySource) -> None:
    if source.kind == SourceKind.EXPORTER and not source.url_list:
        raise DomainError("An exporter source needs at least one /metrics URL.", field="urls")
    for url in source.url_list:
        why = "longer than 500 characters" if len(url) > 500 else url_refusal(url)
        if why:
            raise DomainError(f"{url_shown(url)[:100]}: {why}", field="urls")
    if source.kind == SourceKind.PROMETHEUS and not source.base_url:
        raise DomainError("A Prometheus source needs the query API's URL.", field="base_url")
    why = source.base_url and url_refusal(source.base_url)
    if why:
        raise DomainError(f"{url_shown(source.base_url)[:100]}: {why}", field="base_url")
    if not selector_valid(source.selector):
        raise DomainError('Label matchers only, like job="dcgm-exporter".', field="selector")
    if 3600 % source.window_s:
        raise DomainError("The window must divide an hour (60 s, 300 s...).", field="window_s")
    if source.auth == AuthKind.BASIC and not source.username:
        raise DomainError("Basic authentication needs a user name.", field="username")


def _audit_changes(source: TelemetrySource, before: dict | None, secret_changed: bool) -> dict:
    after = {name: getattr(source, name) for name in AUDITED}
    changes = {name: [before.get(name) if before else None, value]
               for name, value in after.items() if not before or before.get(name) != value}
    if secret_changed:
        changes["secret"] = f"set ({source.secret_prefix}…)" if source.secret_prefix else "removed"
    return changes


@transaction.atomic
def source_save(*, source: TelemetrySource, secret: str | None, actor) -> TelemetrySource:
    """Create or change a source after checking it; `secret` None keeps the stored one,
    "" removes it. The audit log names what changed, never the secret itself."""
    _check(source)
    before = None
    if source.pk:
        before = TelemetrySource.objects.filter(pk=source.pk).values(*AUDITED).first()
    if secret is not None:
        source.secret_encrypted, source.secret_prefix = secret_seal(secret)
    source.full_clean(exclude=["cursor", "cluster"])
    source.save()
    audit_record(actor=actor, action="telemetry.source_save" if before else
                 "telemetry.source_create", obj=source,
                 changes=_audit_changes(source, before, secret is not None))
    return source


@transaction.atomic
def source_delete(*, source: TelemetrySource, actor) -> None:
    """Delete a source; what it imported stays (samples belong to GPUs, not to sources)."""
    audit_record(actor=actor, action="telemetry.source_delete", obj=source,
                 changes={"name": source.name})
    source.gpus.all().delete()
    source.delete()


def _failure_record(source: TelemetrySource, reason: str, now: datetime) -> None:
    logger.warning("telemetry source %s failed: %s", source.name, reason)
    TelemetrySource.objects.filter(pk=source.pk).update(
        last_pull_at=now, last_error=reason[:500], last_error_at=now,
        failures=F("failures") + 1)


def exporters_scrape(*, source: TelemetrySource) -> list[str]:
    """Scrape every exporter of the source once and keep the readings; the reasons of
    those that failed (the others are kept: one dead exporter costs only its GPUs)."""
    failed = []
    session = session_for(source)
    try:
        for url in source.url_list:
            try:
                raw = body_get(session, url)
                at = timezone.now().timestamp()
                series = exposition.exposition_parse(raw.decode("utf-8", "replace"), where=url)
            except SourceError as exc:
                failed.append(exc.reason)
                continue
            ScrapedReading.objects.create(source=source, url=url[:500], at=at, series=series)
    finally:
        session.close()
    return failed


def _slurm_settled(source: TelemetrySource, *, end: datetime, now: datetime) -> datetime:
    """How far a source naming Slurm jobs (`hpc_job`) may be imported: to where the
    cluster's Slurm accounting import has reached (its jobs' accounts and users are
    known there), waiting at most TELEMETRY_SLURM_WAIT_S; no wait where no Slurm backend
    imports the accounting."""
    if not source.observed.get("hpc_job"):
        return end
    on = BackendConfig.objects.filter(cluster_id=source.cluster_id).exclude(
        mode=BackendConfig.Mode.OFF).filter(cluster__scheduler=Cluster.Scheduler.SLURM)
    if not on.exists():
        return end
    settled = ImportCursor.objects.filter(cluster_id=source.cluster_id).values_list(
        "imported_until", flat=True).first()
    waited = now - timedelta(seconds=conf.SLURM_WAIT_S)
    reached = max(settled or waited, waited)
    return min(end, aligned(reached, source.window_s) - timedelta(seconds=source.window_s))


def source_pull(*, source: TelemetrySource, now: datetime) -> ImportResult | None:
    """Import the source's windows closed since its cursor (exporters: scrape first),
    up to the last whose next window has closed too (it tells where a GPU stopped);
    the cursor follows each chunk stored. A failure is recorded on the source (its page,
    /metrics and the admin's home page show it) and nothing of the failing chunk is kept."""
    failed: list[str] = []
    window = timedelta(seconds=source.window_s)
    if source.kind == SourceKind.EXPORTER:
        failed = exporters_scrape(source=source)
        end = aligned(now, source.window_s) - window
    else:
        end = aligned(now - timedelta(seconds=source.delay_s), source.window_s) - window
    end = _slurm_settled(source, end=end, now=now)
    start = source.cursor or end - timedelta(seconds=FIRST_PULL_S)
    try:
        result = range_import(source=source, start=start, end=end, advance_cursor=True, now=now)
    except SourceError as exc:
        _failure_record(source, exc.reason, now)
        return None
    if source.kind == SourceKind.EXPORTER:
        ScrapedReading.objects.filter(
            source=source, at__lt=end.timestamp() - source.window_s).delete()
    if failed:
        _failure_record(source, "; ".join(failed), now)
    else:
        TelemetrySource.objects.filter(pk=source.pk).update(
            last_pull_at=now, last_success_at=now, last_error="", failures=0)
    return result


@transaction.atomic
def sources_claim_due(*, now: datetime) -> list[int]:
    """The enabled sources whose interval has passed since their last pull, marked as
    pulled now (a slow pull is not queued again by the next beat)."""
    due = [source.pk for source in TelemetrySource.objects.select_for_update(skip_locked=True)
           .filter(enabled=True).only("pk", "last_pull_at", "interval_s")
           if source.last_pull_at is None
           or now - source.last_pull_at >= timedelta(seconds=source.interval_s)]
    TelemetrySource.objects.filter(pk__in=due).update(last_pull_at=now)
    return due
