"""Window alignment, half-up rounding, and the aggregation of polls into a sample."""

from fractions import Fraction

import pytest

from agent.model import GpuReading
from agent.windows import (
    GpuAccumulator,
    check_window_s,
    iso,
    round_half_up,
    window_end_after,
)


def reading(**fields):
    base = dict(util_gpu=[0], util_mem=0, memory_used_bytes=0, power_w=100.0, energy_mj=0,
                temp_c=30, clock_event_reasons=0, ecc_corrected_total=0, ecc_uncorrected_total=0,
                remap_pending=False, processes=[])
    return GpuReading(**{**base, **fields})


@pytest.mark.parametrize("window_s", [1, 5, 10, 60, 300, 600])
def test_windows_that_divide_an_hour_are_accepted(window_s):
    check_window_s(window_s)


@pytest.mark.parametrize("window_s", [0, 7, 3600, 900, -60])
def test_windows_that_break_the_protocol_are_refused(window_s):
    with pytest.raises(ValueError):
        check_window_s(window_s)


def test_window_boundaries_are_multiples_from_midnight_utc():
    midnight = 1_795_910_400  # 2026-11-29T00:00:00Z
    assert iso(midnight) == "2026-11-29T00:00:00Z"
    assert window_end_after(midnight + 61.7, 60) == midnight + 120
    assert window_end_after(midnight + 59.999, 60) == midnight + 60
    # Exactly on a boundary: the window starting there ends one length later.
    assert window_end_after(midnight + 60, 60) == midnight + 120
    assert window_end_after(midnight + 3599.5, 300) == midnight + 3600


def test_timestamps_are_whole_seconds_truncated_towards_the_past():
    assert iso(1_795_910_400.999) == "2026-11-29T00:00:00Z"


@pytest.mark.parametrize(("value", "expected"), [
    (Fraction(2675, 1000), 2.68),  # half goes up, exactly (a float 2.675 is below the half)
    (2.675, 2.68),  # a decimal literal rounds as written
    (Fraction(1, 3), 0.33),
    (Fraction(200, 3), 66.67),
    (87.5, 87.5),
    (0, 0.0),
    (Fraction(-5, 1000), -0.01),  # half away from zero
    (None, None),
])
def test_round_half_up(value, expected):
    assert round_half_up(value) == expected


def test_a_window_averages_all_samples_and_keeps_the_maximum():
    acc = GpuAccumulator()
    acc.prime(reading(energy_mj=1_000_000))
    acc.add(reading(util_gpu=[100, 50], memory_used_bytes=10, energy_mj=1_500_000, temp_c=70))
    acc.add(reading(util_gpu=[0], memory_used_bytes=20, energy_mj=2_000_000, temp_c=60,
                    clock_event_reasons=4))
    window, deltas = acc.take()
    assert window.readings == 2
    assert window.util_gpu.avg() == 50 and window.util_gpu.max == 100
    assert window.memory_used.avg() == 15 and window.memory_used.max == 20
    assert window.temp_c_max == 70 and window.clock_event_reasons == 4
    assert deltas["energy_mj"] == 1_000_000 and deltas["ecc_corrected"] == 0


def test_energy_of_consecutive_windows_is_the_counter_delta_across_the_boundary():
    acc = GpuAccumulator()
    acc.prime(reading(energy_mj=0))
    acc.add(reading(energy_mj=600))
    assert acc.take()[1]["energy_mj"] == 600
    acc.add(reading(energy_mj=1000))
    assert acc.take()[1]["energy_mj"] == 400


def test_a_counter_going_backwards_voids_that_window_only():
    acc = GpuAccumulator()
    acc.prime(reading(energy_mj=5000))
    assert acc.add(reading(energy_mj=6000)) == []
    assert acc.add(reading(energy_mj=10)) == ["energy"]  # driver reload: the counter restarted
    assert acc.take()[1]["energy_mj"] is None
    acc.add(reading(energy_mj=510))
    assert acc.take()[1]["energy_mj"] == 500


def test_a_counter_never_primed_gives_no_delta_for_its_first_window():
    acc = GpuAccumulator()
    acc.add(reading(energy_mj=100))
    assert acc.take()[1]["energy_mj"] is None
    acc.add(reading(energy_mj=300))
    assert acc.take()[1]["energy_mj"] == 200


def test_an_unsupported_counter_stays_null():
    acc = GpuAccumulator()
    acc.prime(reading(energy_mj=None, ecc_corrected_total=None))
    acc.add(reading(energy_mj=None, ecc_corrected_total=None))
    deltas = acc.take()[1]
    assert deltas["energy_mj"] is None and deltas["ecc_corrected"] is None


def test_a_supported_process_without_samples_counts_as_zero_sm_utilization():
    acc = GpuAccumulator()
    acc.add_process((10, 99), "python", None, 5, [80])
    acc.add_process((10, 99), "python", None, 7, [])
    acc.add_process((11, 99), "python", None, 1, None)
    procs = acc.take()[0].processes
    assert procs[(10, 99)].util_sm.avg() == 40 and procs[(10, 99)].memory_max == 7
    assert not procs[(11, 99)].util_sm_supported
