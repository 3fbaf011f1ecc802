"""No template of the product carries script the Content-Security-Policy would refuse: no
<script> with a body, no on...= event attribute, no javascript: URL. Every page's script is
a static file (static/js/). The browser crawl (test_csp_browser.py) sees the pages a user
reaches by links; this sees every template, linked or not."""

import re
from pathlib import Path

from django.conf import settings

INLINE = [
    (re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>\s*[^<\s]", re.I), "a <script> with a body"),
    (re.compile(r"<[a-z][^>]*\son[a-z]+\s*=", re.I), "an on...= event attribute"),
    (re.compile(r"""(?:href|src|action|formaction)\s*=\s*["']?\s*javascript:""", re.I),
     "a javascript: URL"),
]


def _templates() -> list[Path]:
    roots = [Path(settings.BASE_DIR) / "templates",
             *Path(settings.BASE_DIR).glob("*/templates"),
             *Path(settings.BASE_DIR).glob("gpuquota/*/templates")]
    return sorted(p for root in roots for p in root.rglob("*.html"))


def test_no_template_has_inline_script():
    templates = _templates()
    assert len(templates) > 50
    found = [f"{path.relative_to(settings.BASE_DIR)}: {what}" for path in templates
             for pattern, what in INLINE if pattern.search(path.read_text())]
    assert found == []


def test_the_check_finds_what_it_looks_for():
    samples = ['<script>alert(1)</script>', '<form onsubmit="return confirm(1)">',
               '<a href="javascript:go()">', "<button ONCLICK='x()'>"]
    safe = ['<script src="/static/js/confirm.js" defer></script>',
            '<form data-confirm="Cancel?">', '<p>one onion=3</p>']
    assert all(any(p.search(s) for p, _ in INLINE) for s in samples)
    assert not any(p.search(s) for p, _ in INLINE for s in safe)
