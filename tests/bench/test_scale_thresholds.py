"""The scale check's thresholds: a page past its queries or CPU fails like a loop, one
without a threshold asks for a recalibration, and a calibration keeps each threshold at
least the previous one's (a quiet machine does not tighten them)."""

from tests.bench.scale_thresholds import calibrate, over

LIMITS = {"loops": {"sweep": {"queries": 4, "cpu_s": 0.3}},
          "pages": {"team": {"queries": 100, "cpu_s": 1.0}}}


def test_a_page_past_its_queries_or_cpu_fails_like_a_loop():
    assert over({"loops": {"sweep": {"queries": 4, "cpu_s": 0.3}},
                 "pages": {"team": {"queries": 100, "cpu_s": 1.0}}}, LIMITS) == {}
    assert over({"pages": {"team": {"queries": 101, "cpu_s": 0.1}}}, LIMITS) == {
        "pages/team": "101 queries > 100"}
    assert over({"pages": {"team": {"queries": 9, "cpu_s": 1.5}}}, LIMITS) == {
        "pages/team": "1.500 CPU s > 1.0"}
    assert "recalibrate" in over({"pages": {"new-page": {"queries": 1, "cpu_s": 0.0}}},
                                 LIMITS)["pages/new-page"]


def test_a_calibration_keeps_each_threshold_at_least_the_previous_one():
    runs = [{"loops": {"sweep": {"queries": 1, "cpu_s": 0.01}},
             "pages": {"team": {"queries": 74, "cpu_s": 0.3}, "new": {"queries": 5,
                                                                      "cpu_s": 0.02}}}] * 5
    found = calibrate(runs, note="n", previous=LIMITS)
    assert (found["pages"]["team"]["queries"], found["pages"]["team"]["cpu_s"]) == (100, 1.0)
    assert (found["loops"]["sweep"]["queries"], found["loops"]["sweep"]["cpu_s"]) == (4, 0.3)
    assert (found["pages"]["new"]["queries"], found["pages"]["new"]["cpu_s"]) == (8, 0.27)
    assert found["pages"]["team"]["seen"]["queries"] == [74]
    fresh = calibrate(runs, note="n")
    assert (fresh["pages"]["team"]["queries"], fresh["pages"]["team"]["cpu_s"]) == (89, 0.9)
