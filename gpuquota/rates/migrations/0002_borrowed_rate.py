"""Rate cards gain `borrowed_rate` (accounting.md, Lending): existing cards start with
their on-demand rate, the price borrowed work was paid at before lending existed."""

from django.db import migrations, models
from django.db.models import F


def from_on_demand(apps, schema_editor):
    apps.get_model("rates", "RateCard").objects.update(borrowed_rate=F("on_demand_rate"))


class Migration(migrations.Migration):

    dependencies = [
        ("rates", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="ratecard",
            name="borrowed_rate",
            field=models.DecimalField(decimal_places=4, default=0, max_digits=12,
                                      help_text="Per borrowed busy GPU-hour: a lent GPU's "
                                                "busy time, paid by the borrowers."),
            preserve_default=False,
        ),
        migrations.RunPython(from_on_demand, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name="ratecard", name="rate_card_rates_non_negative"),
        migrations.AddConstraint(
            model_name="ratecard",
            constraint=models.CheckConstraint(
                condition=models.Q(("reserved_rate__gte", 0), ("on_demand_rate__gte", 0),
                                   ("borrowed_rate__gte", 0)),
                name="rate_card_rates_non_negative"),
        ),
    ]
