"""Rate cards move from `reports` to `rates` (issue 20 §6): the model changes app in
Django's state only; the table, its rows, constraints and sequence stay as they are.
The content type, and the audit entries naming the model, follow it."""

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models

import gpuquota.core.constraints
import gpuquota.core.fields


def label_move(apps, schema_editor, old="reports", new="rates"):
    ContentType = apps.get_model("contenttypes", "ContentType")
    AuditEntry = apps.get_model("core", "AuditEntry")
    if not ContentType.objects.filter(app_label=new, model="ratecard").exists():
        ContentType.objects.filter(app_label=old, model="ratecard").update(app_label=new)
    AuditEntry.objects.filter(object_type=f"{old}.ratecard").update(object_type=f"{new}.ratecard")


def label_back(apps, schema_editor):
    label_move(apps, schema_editor, old="rates", new="reports")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("core", "0001_initial"),
        ("inventory", "0001_initial"),
        ("reports", "0004_late_usage_check"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="RateCard",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                                   serialize=False, verbose_name="ID")),
                        ("valid_from", gpuquota.core.fields.WholeSecondDateTimeField()),
                        ("valid_until", gpuquota.core.fields.WholeSecondDateTimeField(
                            blank=True, null=True)),
                        ("reserved_rate", models.DecimalField(
                            decimal_places=4, help_text="Per reserved GPU-hour.", max_digits=12)),
                        ("on_demand_rate", models.DecimalField(
                            decimal_places=4, help_text="Per busy unreserved GPU-hour.",
                            max_digits=12)),
                        ("currency", models.CharField(default="USD", max_length=3, validators=[
                            django.core.validators.RegexValidator("^[A-Z]{3}$", "ISO 4217 code")])),
                        ("gpu_class", models.ForeignKey(
                            on_delete=django.db.models.deletion.PROTECT,
                            related_name="rate_cards", to="inventory.gpuclass")),
                    ],
                    options={
                        "db_table": "reports_ratecard",
                        "ordering": ["gpu_class__name", "valid_from"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("valid_until__isnull", True),
                                                   ("valid_until__gt", models.F("valid_from")),
                                                   _connector="OR"),
                                name="rate_card_interval_valid"),
                            models.CheckConstraint(
                                condition=models.Q(("reserved_rate__gte", 0),
                                                   ("on_demand_rate__gte", 0)),
                                name="rate_card_rates_non_negative"),
                            gpuquota.core.constraints.NoOverlap(
                                name="rate_card_no_overlap", key=["gpu_class"],
                                violation_error_message="Rate cards of one class cannot overlap."),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(label_move, label_back),
    ]
