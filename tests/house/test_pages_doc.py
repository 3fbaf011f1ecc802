"""docs/pages.md is a reference of the pages as they are, not a log of how they changed:
no "no longer", "now runs", "(was ...)" or "Small things"."""

import re
from pathlib import Path

import gpuquota

PAGES = Path(gpuquota.__file__).resolve().parent.parent / "docs" / "pages.md"
CHANGELOG_WORDS = re.compile(r"no longer|now runs|\(was [^)]*\)|small things|is now|are now",
                             re.I)


def test_pages_md_reads_as_a_reference():
    text = PAGES.read_text()
    assert CHANGELOG_WORDS.findall(text) == []
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[:4] == ["Everyone", "Team leads", "The fleet page", "Admin pages"]
