"""Normalisation rules on exporter text, without Prometheus: the XID counter, the old pod
label names, series without a UUID, DCGM's 32-bit blank, text that is not the format."""

import pytest

from gpuquota.telemetry.errors import SourceError
from gpuquota.telemetry.exposition import exposition_parse, window_figures
from gpuquota.telemetry.normalise import reports_build

UUID = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
START = 1_800_000_000 - 1_800_000_000 % 60


def _text(util: float, *, xid_count: int = 0, extra: str = "") -> str:
    labels = f'gpu="0",uuid="{UUID}",hostname="dcgm-exporter-abc",pod_namespace="nlp",' \
             f'pod_name="llm-0"'
    return (f"# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}\n"
            f'# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n'
            f'DCGM_EXP_XID_ERRORS_COUNT{{{labels},xid="48"}} {xid_count}\n{extra}')


def _reports(texts: list[str]):
    readings = [(START - 60 + 10 * i, exposition_parse(text, where="t"))
                for i, text in enumerate(texts)]
    table = window_figures(readings, start=START - 60, stop=START + 120, window_s=60)
    return reports_build(table, start=START, stop=START + 120, window_s=60)


def test_xid_counter_growth_old_pod_labels_and_blanks():
    texts = [_text(10) for _ in range(6)]  # the window before: the counter at 0
    texts += [_text(2147483632) for _ in range(3)] + [_text(40) for _ in range(3)]
    texts += [_text(40, xid_count=2) for _ in range(6)]
    no_uuid = '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="1"} 5\n'
    texts[-1] += no_uuid
    (report,), skipped = _reports(texts)
    assert skipped == 1
    first, second = report.samples
    assert first["readings"] == 3 and first["util_gpu_avg"] == 40.0  # the blanks dropped
    assert [(e["type"], e["xid"], e["ts"]) for e in report.events] == [
        ("xid", 48, second["window_start"])]
    assert {(p["job"]["source"], p["job"]["account"], p["job"]["id"])
            for p in report.processes} == {("kubernetes", "nlp", "llm-0")}
    assert report.util_metric == "DCGM_FI_DEV_GPU_UTIL"


def test_text_that_is_not_the_format_is_refused():
    with pytest.raises(SourceError, match="not Prometheus exposition text"):
        exposition_parse('DCGM_FI_DEV_GPU_UTIL{gpu="0" 5\n', where="t")


def test_profiling_fields_become_the_samples_percentages_and_absent_ones_no_data():
    labels = f'gpu="0",uuid="{UUID}",hostname="dcgm-exporter-abc"'
    prof = "".join(f"# TYPE {name} gauge\n{name}{{{labels}}} {value}\n" for name, value in (
        ("DCGM_FI_PROF_SM_ACTIVE", 0.62), ("DCGM_FI_PROF_SM_OCCUPANCY", 0.31),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.004)))  # no DCGM_FI_PROF_DRAM_ACTIVE
    (report,), _ = _reports([_text(90)] * 12 + [_text(90, extra=prof)] * 6)
    before, with_prof = report.samples
    assert (with_prof["sm_active_avg"], with_prof["sm_occupancy_avg"],
            with_prof["tensor_active_avg"], with_prof["dram_active_avg"]) == (62.0, 31.0, 0.4,
                                                                              None)
    assert {before[k] for k in ("sm_active_avg", "sm_occupancy_avg", "tensor_active_avg",
                                "dram_active_avg")} == {None}  # the window without: no data
