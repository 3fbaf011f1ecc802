"""`{% form_token %}`: the one-time token of a creating form (`gpuquota.core.idempotency`):
the token the page was posted with when it shows the form again with errors (so a
corrected form is still one submission), else a new one."""

import uuid

from django import template
from django.utils.html import format_html

from gpuquota.core.idempotency import FORM_FIELD, KEY_RE

register = template.Library()


@register.simple_tag(takes_context=True)
def form_token(context: template.Context) -> str:
    token = context.get(FORM_FIELD)
    request = context.get("request")
    if token is None and request is not None and request.method == "POST":
        posted = request.POST.get(FORM_FIELD, "")
        token = posted if KEY_RE.fullmatch(posted) else None
    return format_html('<input type="hidden" name="{}" value="{}">', FORM_FIELD,
                       token or uuid.uuid4().hex)
