"""Free room on every page of the rollup table (PostgreSQL), so an open hour's rows,
updated in place each recompute (`rollup_rows`), get new versions on their own page:
HOT updates that page pruning reclaims without a vacuum, and no index entry each."""

from django.db import migrations

TABLE = "usage_gpuhourusage"


def _fillfactor(percent: int):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"ALTER TABLE {TABLE} SET (fillfactor = {percent})")
    return apply


class Migration(migrations.Migration):

    dependencies = [("usage", "0004_dirtygpuhour_to_outbox")]

    operations = [migrations.RunPython(_fillfactor(70), _fillfactor(100))]
