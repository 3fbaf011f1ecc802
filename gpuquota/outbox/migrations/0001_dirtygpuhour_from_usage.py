"""The outbox model moves from the usage app to this one: state only, the table stays."""

import django.db.models.deletion
from django.db import migrations, models

import gpuquota.core.fields


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("inventory", "0001_initial"),
        ("usage", "0003_gpuhourusage_rate_card"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="DirtyGpuHour",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                                   serialize=False, verbose_name="ID")),
                        ("hour", gpuquota.core.fields.WholeSecondDateTimeField()),
                        ("generation", models.BigIntegerField(default=1)),
                        ("marked_at", models.DateTimeField()),
                        ("gpu", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT,
                                                  related_name="+", to="inventory.gpu")),
                    ],
                    options={
                        "db_table": "usage_dirtygpuhour",
                        "indexes": [models.Index(fields=["marked_at"],
                                                 name="usage_dirty_marked__8f6318_idx")],
                        "constraints": [models.UniqueConstraint(
                            fields=("gpu", "hour"), name="dirty_gpu_hour_unique")],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
