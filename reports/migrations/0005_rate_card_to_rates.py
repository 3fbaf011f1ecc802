"""Rate cards now live in `rates` (issue 20 §6): forgotten here in Django's state only;
the table stays, owned by `rates.RateCard`."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("rates", "0001_initial"),
        ("reports", "0004_late_usage_check"),
        ("usage", "0007_rate_card_in_rates"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="RateCard")],
            database_operations=[],
        ),
    ]
