"""The suite's scheduling (tests/parallel.py): files start longest first; the durations
file names only files that exist."""

import json
from pathlib import Path

from tests.parallel import DURATIONS, units_longest_first, work_unit

ROOT = Path(__file__).resolve().parents[2]


def test_a_unit_is_a_file():
    assert work_unit("tests/schedulers/test_slurm_live.py::test_x[a]") == (
        "tests/schedulers/test_slurm_live.py")


def test_units_start_longest_first_and_unlisted_files_count_by_their_tests():
    units = {"a.py": {"a.py::t": False}, "b.py": {f"b.py::t{i}": False for i in range(100)},
             "s.py": {"s.py::t1": False, "s.py::t2": False}}
    seconds = {"a.py": 5.0, "s.py": 70.0}
    assert units_longest_first(units, seconds) == ["s.py", "b.py", "a.py"]


def test_the_durations_name_existing_files():
    listed = json.loads(Path(DURATIONS).read_text())
    assert [path for path in listed if not (ROOT / path).is_file()] == []
