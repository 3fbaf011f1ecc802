"""`NoOverlap`: "never two overlapping intervals of the same key", made true by
PostgreSQL under concurrency.

An ExclusionConstraint over `tstzrange(start, end, '[)')` (an open end is NULL,
unbounded) with `=` on the key columns (btree_gist). On SQLite, the embedded
single-process default, the constraint is not created and services check in
Python before writing.
"""

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeBoundary, RangeOperators
from django.db.models import Func


class TsTzRange(Func):
    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


class NoOverlap(ExclusionConstraint):
    def __init__(
        self,
        *,
        name: str,
        key: list[str] | tuple = (),
        start: str = "valid_from",
        end: str = "valid_until",
        expressions=None,
        condition=None,
        violation_error_message=None,
        **kwargs,
    ):
        if expressions is None:
            expressions = [(field, RangeOperators.EQUAL) for field in key]
            expressions.append((TsTzRange(start, end, RangeBoundary()), RangeOperators.OVERLAPS))
        super().__init__(
            name=name,
            expressions=expressions,
            index_type="gist",
            condition=condition,
            violation_error_message=violation_error_message,
            **kwargs,
        )

    @staticmethod
    def _postgres(schema_editor) -> bool:
        return schema_editor.connection.vendor == "postgresql"

    def constraint_sql(self, model, schema_editor):
        return (
            super().constraint_sql(model, schema_editor) if self._postgres(schema_editor) else None
        )

    def create_sql(self, model, schema_editor):
        return super().create_sql(model, schema_editor) if self._postgres(schema_editor) else None

    def remove_sql(self, model, schema_editor):
        return super().remove_sql(model, schema_editor) if self._postgres(schema_editor) else None

    def validate(self, model, instance, exclude=None, using="default"):
        from django.db import connections

        if connections[using].vendor == "postgresql":
            super().validate(model, instance, exclude=exclude, using=using)
