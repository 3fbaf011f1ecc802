"""The oracle bound of the reliability benchmark (bench/reliability_oracle.py): the most
powerful test at a false-flag budget, with the generator's true rates."""

from bench.reliability_oracle import bound


def test_the_bound_grows_with_the_budget_and_the_second_signal():
    alone = [bound(b, 14.6, incidents_only=True) for b in (0.25, 0.5, 1.0, 2.0)]
    both = [bound(b, 14.6) for b in (0.25, 0.5, 1.0, 2.0)]
    assert alone == sorted(alone) and both == sorted(both)
    assert all(a < b < 1 for a, b in zip(alone, both, strict=True))
    # at one false flag a day: 88.3 % of the GPU lemons on incidents alone, 91.8 % with jobs
    assert round(100 * alone[2], 1) == 88.3 and round(100 * both[2], 1) == 91.8
