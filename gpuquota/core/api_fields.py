"""Input fields every API shares: instants that cannot crash a view, and choices whose
refusal names the allowed values."""

from datetime import datetime

from django.utils.dateparse import parse_datetime
from rest_framework import serializers

MIN_YEAR = 1970
MAX_YEAR = 2999


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 instant that must carry an offset or `Z` (naive times are refused),
    be a real date and time (no minute 99, no 30 February, no offset +25:00) and fall
    in the years 1970..2999, so date arithmetic on it can never overflow. An empty
    string is not an instant (leave the parameter out instead)."""

    def get_value(self, dictionary):
        # DRF reads an empty optional form or query value as "not given"; here it is refused.
        if self.field_name in dictionary and dictionary.get(self.field_name) == "":
            return ""
        return super().get_value(dictionary)

    def run_validation(self, data=serializers.empty):
        if data == "":
            raise serializers.ValidationError(
                "Give a date and time (e.g. 2026-12-01T09:00:00Z), or leave it out.")
        return super().run_validation(data)

    def to_internal_value(self, value):
        if isinstance(value, str):
            try:
                parsed = parse_datetime(value.strip())
            except ValueError as exc:  # well-formed but impossible: "12:99", "+25:00"
                raise serializers.ValidationError(
                    f"Not a real date and time ({exc}): give e.g. 2026-12-01T09:00:00Z."
                ) from exc
            if parsed is not None and parsed.tzinfo is None:
                raise serializers.ValidationError(
                    "Give a UTC offset or Z (e.g. 2026-12-01T09:00:00Z); naive times are refused."
                )
        result = super().to_internal_value(value)
        return self._in_range(result)

    def _in_range(self, value: datetime) -> datetime:
        if not MIN_YEAR <= value.year <= MAX_YEAR:
            raise serializers.ValidationError(
                f"Out of range: give a year from {MIN_YEAR} to {MAX_YEAR}.")
        return value


class ChoiceField(serializers.ChoiceField):
    """A choice whose refusal lists the allowed values. An empty value given is refused
    like any other value that is not a choice (unless blank is allowed), not read as
    "not given"."""

    def get_value(self, dictionary):
        if self.field_name in dictionary and dictionary.get(self.field_name) == "":
            return ""
        return super().get_value(dictionary)

    def to_internal_value(self, data):
        if data == "" and self.allow_blank:
            return ""
        key = str(data)
        if key not in self.choice_strings_to_values:
            allowed = ", ".join(str(choice) for choice in self.choices)
            raise serializers.ValidationError(
                f'"{key}" is not a valid choice; allowed: {allowed}.', code="invalid_choice")
        return self.choice_strings_to_values[key]


def query_parse(serializer_class, request) -> dict:
    """Validated query parameters of a request (a 400 naming each bad one). A parameter
    given empty (`?team=`) is refused like any other bad value where its field does not
    allow blanks: DRF would otherwise read it from a query string as left out."""
    serializer = serializer_class(data=request.query_params)
    blank = {name: [serializers.CharField.default_error_messages["blank"]]
             for name, field in serializer.fields.items()
             if request.query_params.get(name) == "" and not getattr(field, "allow_blank", False)}
    if blank:
        raise serializers.ValidationError(blank)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
