"""Model fields shared by every app."""

from datetime import datetime

from django.db import models


def whole_second(value: datetime | None) -> datetime | None:
    """Truncate towards the past to a whole second (accounting.md: every stored
    instant is a whole second)."""
    if value is None:
        return None
    return value.replace(microsecond=0)


class WholeSecondDateTimeField(models.DateTimeField):
    """A DateTimeField that never stores a fraction of a second."""

    def pre_save(self, model_instance, add):
        value = whole_second(super().pre_save(model_instance, add))
        setattr(model_instance, self.attname, value)
        return value

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return whole_second(value) if isinstance(value, datetime) else value
