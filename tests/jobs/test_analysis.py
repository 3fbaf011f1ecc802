"""The notes of the job analysis on series of known behaviour (no database)."""

from gpuquota.jobs.analysis import MIG_SLICE_SHARE, analyse
from tests.jobs.shapes import facts, series


def codes(result) -> list[str]:
    return [n.code for n in result.notes]


def test_a_healthy_job_has_no_note_and_wastes_nothing():
    gpus = [series(f"n1/{i}", [85] * 120) for i in range(4)]
    result = analyse(facts=facts(120), gpus_held=4, series=gpus)
    assert codes(result) == []
    assert result.wasted_gpu_s == 0 and result.held_gpu_s == 4 * 7200
    assert round(result.util_avg_pct) == 85 and result.idle_share_pct == 0


def test_three_of_four_gpus_unused_are_named_and_wasted_whole():
    gpus = [series("n1/0", [90] * 120)] + [series(f"n1/{i}", [0] * 120, memory_gib=0)
                                           for i in (1, 2, 3)]
    result = analyse(facts=facts(120), gpus_held=4, series=gpus)
    assert codes(result) == ["gpus_unused"]
    note = result.notes[0]
    assert note.title == "This job did not use 3 of the 4 GPUs it held."
    assert note.wasted_gpu_s == 3 * 7200 == result.wasted_gpu_s
    assert "fewer GPUs" in note.advice


def test_a_single_gpu_never_used_says_so():
    result = analyse(facts=facts(60), gpus_held=1, series=[series("n1/0", [0] * 60,
                                                                   memory_gib=0)])
    assert codes(result) == ["gpus_unused"]
    assert result.notes[0].title == "This job did not use its GPU."


def test_memory_held_at_zero_utilization_is_its_own_pitfall():
    gpus = [series("n1/0", [80] * 60), series("n1/1", [0] * 60, memory_gib=30)]
    result = analyse(facts=facts(60), gpus_held=2, series=gpus)
    assert codes(result) == ["memory_held_idle"]
    assert result.notes[0].wasted_gpu_s == 3600


def test_a_brief_burst_does_not_make_an_idle_gpu_used():
    utils = [0] * 118 + [100, 0]  # under 1 % on the mean
    result = analyse(facts=facts(120), gpus_held=2,
                     series=[series("n1/0", [70] * 120), series("n1/1", utils, memory_gib=0)])
    assert codes(result) == ["gpus_unused"]


def test_an_idle_tail_is_named_with_its_length():
    utils = [90] * 60 + [0] * 60
    result = analyse(facts=facts(120), gpus_held=2,
                     series=[series("n1/0", utils), series("n1/1", utils)])
    assert codes(result) == ["idle_tail"]
    assert result.notes[0].wasted_gpu_s == 2 * 3600
    assert "last 1.0 h" in result.notes[0].title


def test_a_short_tail_is_not_named():
    utils = [90] * 100 + [0] * 20
    result = analyse(facts=facts(120), gpus_held=1, series=[series("n1/0", utils)])
    assert codes(result) == []


def test_a_small_job_on_a_large_gpu_fits_a_mig_slice():
    result = analyse(facts=facts(120), gpus_held=1,
                     series=[series("n1/0", [8] * 120, memory_gib=4, total_gib=80)])
    assert codes(result) == ["mig_sized"]
    assert result.notes[0].wasted_gpu_s == int(7200 * (1 - MIG_SLICE_SHARE))


def test_bursts_with_gaps_are_input_bound():
    peaks = [100] * 120
    result = analyse(facts=facts(120), gpus_held=2,
                     series=[series(f"n1/{i}", [30] * 120, peaks=peaks) for i in range(2)])
    assert codes(result) == ["input_bound"]
    assert result.notes[0].wasted_gpu_s == int(2 * 7200 * 0.7)
    assert "num_workers" in result.notes[0].advice


def test_low_utilization_without_bursts():
    result = analyse(facts=facts(120), gpus_held=2,
                     series=[series(f"n1/{i}", [10] * 120, memory_gib=40) for i in range(2)])
    assert codes(result) == ["low_utilization"]


def test_an_interactive_session_idle_for_hours():
    minutes = 9 * 60
    result = analyse(facts=facts(minutes, interactive=True), gpus_held=1,
                     series=[series("n1/0", ([40] * 5 + [2] * 55) * 9, memory_gib=30)])
    assert codes(result) == ["interactive_idle"]


def test_short_jobs_and_far_time_limits_are_advice_without_waste():
    short = analyse(facts=facts(3), gpus_held=1, series=[series("n1/0", [90] * 3)])
    assert codes(short) == ["short_job"] and short.wasted_gpu_s == 0
    far = analyse(facts=facts(60, time_limit_s=24 * 3600), gpus_held=1,
                  series=[series("n1/0", [90] * 60)])
    assert codes(far) == ["time_limit_far"] and far.notes[0].severity == "advice"


def test_notes_never_count_a_gpu_second_twice():
    """One unused GPU, two used ones with an idle tail: the waste is their sum and no more
    than the job held."""
    used = [90] * 60 + [0] * 60
    gpus = [series("n1/0", used), series("n1/1", used), series("n1/2", [0] * 120, memory_gib=0)]
    result = analyse(facts=facts(120), gpus_held=3, series=gpus)
    assert codes(result) == ["gpus_unused", "idle_tail"]
    assert result.wasted_gpu_s == 7200 + 2 * 3600 <= result.held_gpu_s


def test_a_few_minutes_of_burst_on_a_short_job_do_not_count_as_use():
    utils = [0] * 5 + [100] * 3 + [0] * 22  # 3 busy minutes of 30: under 10 min and half
    result = analyse(facts=facts(30), gpus_held=2,
                     series=[series("n1/0", [80] * 30), series("n1/1", utils, memory_gib=0)])
    assert codes(result) == ["gpus_unused"]


def test_an_idle_tail_does_not_also_read_as_low_utilization():
    utils = [80] * 30 + [0] * 170
    result = analyse(facts=facts(200), gpus_held=2,
                     series=[series("n1/0", utils), series("n1/1", utils)])
    assert codes(result) == ["idle_tail"]


def test_the_benchmark_prints_a_result_per_note(capsys):
    from bench.jobs import main

    main(["--jobs", "60", "--seed", "7", "--running", "8"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("RESULT")]
    assert any(line.startswith("RESULT note=gpus_unused precision=") for line in lines)
    assert "RESULT healthy_noted=0" in lines
    assert lines[-1].startswith("RESULT zero_use_warn_p95_s=") and "healthy_warned=0" in lines[-1]
