"""The suite's scheduling (tests/parallel.py): the live Slurm files run as one unit on one
worker, which starts the dev cluster once; units start longest first; the durations file
names only files that exist."""

import json
import re
from pathlib import Path

from tests.parallel import DURATIONS, SLURM_LIVE, SLURM_UNIT, units_longest_first, work_unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_live_slurm_files_are_one_unit_and_every_other_file_its_own():
    assert {work_unit(f"{path}::test_x[a]") for path in SLURM_LIVE} == {SLURM_UNIT}
    assert work_unit("tests/schedulers/test_slurm_plan.py::test_x") == (
        "tests/schedulers/test_slurm_plan.py")
    marked = re.compile(r"^pytestmark\b.*\bmark\.slurm\b", re.MULTILINE)
    every_slurm_live = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                        if marked.search(p.read_text())}
    assert every_slurm_live == set(SLURM_LIVE)  # a new live file joins the unit


def test_units_start_longest_first_and_unlisted_files_count_by_their_tests():
    units = {"a.py": {"a.py::t": False}, "b.py": {f"b.py::t{i}": False for i in range(100)},
             SLURM_UNIT: {"s1.py::t": False, "s2.py::t": False}}
    seconds = {"a.py": 5.0, "s1.py": 40.0, "s2.py": 30.0}
    assert units_longest_first(units, seconds) == [SLURM_UNIT, "b.py", "a.py"]


def test_the_durations_name_existing_files():
    listed = json.loads(Path(DURATIONS).read_text())
    assert [path for path in listed if not (ROOT / path).is_file()] == []
