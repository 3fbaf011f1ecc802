import pytest


@pytest.fixture(autouse=True)
def _raw_data_kept(monkeypatch):
    """Most of these tests build their history at a fixed instant (`factories.NOW`, 2026):
    its raw samples stay "within retention" whatever the suite's date, or the rollup sweep
    would skip their hours once the calendar passed NOW + 90 days (tests/usage does the same).
    """
    from gpuquota.ingest import conf as ingest_conf

    monkeypatch.setattr(ingest_conf, "RAW_SAMPLE_RETENTION_DAYS", 100 * 365)
