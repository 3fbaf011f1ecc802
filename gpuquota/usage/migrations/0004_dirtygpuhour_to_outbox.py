"""The outbox model now belongs to the outbox app (state only; the table stays)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("usage", "0003_gpuhourusage_rate_card"),
        ("outbox", "0001_dirtygpuhour_from_usage"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="DirtyGpuHour")],
            database_operations=[],
        ),
    ]
