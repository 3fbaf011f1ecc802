"""Web forms of the lending pages: they parse input; the services decide."""

from django import forms

from gpuquota.reservations.models import Reservation

REASON_MAX = 256


class OptOutForm(forms.Form):
    """Turn lending off for one of the team's open reservations ("r<id>") or for all its
    reservations of a class ("c<id>"), with a reason."""

    target = forms.ChoiceField(label="Turn lending off for")
    reason = forms.CharField(max_length=REASON_MAX, strip=True, error_messages={
        "required": "Say why lending is turned off (a benchmark, interactive work...)."})

    def __init__(self, *args, reservations: list[Reservation], gpu_classes: list, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["target"].choices = [
            *[(f"r{r.pk}", f"reservation #{r.pk} ({r.count} × {r.gpu_class.name})")
              for r in reservations],
            *[(f"c{c.pk}", f"every {c.name} reservation of the team") for c in gpu_classes]]
        self._reservations = {f"r{r.pk}": r for r in reservations}
        self._classes = {f"c{c.pk}": c for c in gpu_classes}

    def target_objects(self) -> dict:
        """The service's arguments for the chosen target."""
        key = self.cleaned_data["target"]
        if key in self._reservations:
            return {"reservation": self._reservations[key]}
        return {"gpu_class": self._classes[key]}


class ReturnsPeriodForm(forms.Form):
    days = forms.IntegerField(min_value=1, max_value=366, required=False, initial=30,
                              label="Over the last (days)")
