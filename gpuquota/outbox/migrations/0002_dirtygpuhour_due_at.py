"""Coalescing: each outbox row has the time the sweep takes it (existing rows: due now)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("outbox", "0001_dirtygpuhour_from_usage"),
    ]

    operations = [
        migrations.AddField(
            model_name="dirtygpuhour",
            name="due_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
            preserve_default=False,
        ),
        migrations.AddIndex(
            model_name="dirtygpuhour",
            index=models.Index(fields=["due_at", "id"], name="outbox_dirty_due_idx"),
        ),
    ]
