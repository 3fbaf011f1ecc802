"""The Celery app. Times are UTC; each Django app declares its own beat schedule
as `BEAT_SCHEDULE` in its `tasks` module, collected here."""

import os
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")

app = Celery("gpuquota")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.timezone = "UTC"
app.conf.enable_utc = True
app.autodiscover_tasks()


def collect_beat_schedule() -> dict:
    """The beat schedules of every installed app, merged; entry names must be unique."""
    from django.apps import apps

    schedule: dict = {}
    for config in apps.get_app_configs():
        module_name = f"{config.name}.tasks"
        if find_spec(module_name) is None:
            continue
        for name, entry in getattr(import_module(module_name), "BEAT_SCHEDULE", {}).items():
            if name in schedule:
                raise RuntimeError(f"beat entry {name!r} is declared twice")
            schedule[name] = entry
    return schedule


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_kwargs) -> None:
    sender.conf.beat_schedule = collect_beat_schedule()


@signals.beat_init.connect
@signals.beat_embedded_init.connect
def _beat_state_folder(**_kwargs) -> None:
    """Beat keeps its schedule's state in var/ (`CELERY_BEAT_SCHEDULE_FILENAME`): make it."""
    Path(app.conf.beat_schedule_filename).parent.mkdir(parents=True, exist_ok=True)


@signals.beat_init.connect
def _one_beat(**_kwargs) -> None:
    """Run the schedule only while this beat holds the one-beat lock; stand by until then
    (`gpuquota.core.beat_lock`). beat_init is sent for an embedded beat (`worker -B`) too."""
    from gpuquota.core.beat_lock import beat_lock_hold

    beat_lock_hold()
