"""The README's tour names what the demo shows: step 5's recommendation is the NLP
reservation's idle GPU, its notebook GPU kept by the guarded rule (gpuquota/demo/reclaim.py,
whose simulated GPUs the reclaim tests run)."""

import re
from pathlib import Path

from django.conf import settings

import gpuquota.demo.reclaim as demo_reclaim


def test_tour_step_5_recommends_the_idle_gpu_and_keeps_the_notebook():
    readme = (Path(settings.BASE_DIR) / "README.md").read_text()
    step = re.search(r"^5\. \*\*Reclaim.*?(?=^\S|\Z)", readme, re.M | re.S)[0]
    recommended, _, kept = step.partition("is kept")
    assert "idle GPU" in recommended and "notebook" not in recommended.split("its other")[0]
    assert "notebook" in step.split("its other GPU", 1)[1] and "guarded: held" in step
    assert "leaves idle" in demo_reclaim.__doc__ + demo_reclaim.demo_reclaim_seed.__doc__
    assert "guarded: held" in demo_reclaim.__doc__
