"""The steps the admins' list pages share (`/manage/...`): read the list's filters, apply
a form through a service, end a row of a history (a quota row, a rate card)."""

from django import forms
from django.contrib import messages
from django.shortcuts import redirect

from gpuquota.core.errors import DomainError
from gpuquota.core.forms import EndForm


def filters_read(request, form_class: type[forms.Form]) -> tuple[forms.Form, dict]:
    """The list's filter form bound to the query, and the filters it chose (none while
    it has errors)."""
    form = form_class(request.GET or None)
    if form.is_bound and form.is_valid():
        return form, {k: v for k, v in form.cleaned_data.items() if v}
    return form, {}


def _form_errors(form) -> str:
    return "; ".join(e for errors in form.errors.values() for e in errors)


def form_apply(request, form, action, success: str) -> bool:
    """Call the service with the form's data; its refusal becomes the form's error."""
    if not form.is_valid():
        return False
    try:
        action(form.cleaned_data)
    except DomainError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return False
    messages.success(request, success)
    return True


def row_end(request, end, success: str, back: str):
    """Parse an EndForm, call `end(at, reason)` (a service), say what happened, go back."""
    form = EndForm(request.POST)
    if form.is_valid():
        try:
            end(form.cleaned_data["at"], form.cleaned_data["reason"])
            messages.success(request, success)
        except DomainError as exc:
            messages.error(request, exc.message)
    else:
        messages.error(request, _form_errors(form))
    return redirect(back)
