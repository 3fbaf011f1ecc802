"""The rollups' rate card is now `rates.RateCard` (the same table): state only."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("rates", "0001_initial"),
        ("usage", "0006_gpudayusage"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="gpuhourusage",
                    name="rate_card",
                    field=models.ForeignKey(
                        help_text="The rate card of the class in force over these seconds; "
                                  "empty = none.",
                        null=True, on_delete=django.db.models.deletion.PROTECT,
                        related_name="+", to="rates.ratecard"),
                ),
            ],
            database_operations=[],
        ),
    ]
