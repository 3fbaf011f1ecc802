"""A message from its template set: templates/mail/<name>/{subject.txt, body.txt, body.html},
rendered in the recipient's time zone. Text parts are rendered without HTML escaping.
Instants are written as the pages write them (`{% load when %}`: `2026-12-01 16:00`), and
the mail names the zone once (`time_zone`, in the footer; beside an instant in a subject)."""

import hashlib
from dataclasses import dataclass

from django.template import Context, Engine
from django.urls import reverse
from django.utils import timezone

from gpuquota.mail.conf import base_url, message_id_domain


@dataclass(frozen=True)
class RenderedMail:
    subject: str
    text: str
    html: str


def template_names(template: str) -> tuple[str, str, str]:
    folder = f"mail/{template}"
    return f"{folder}/subject.txt", f"{folder}/body.txt", f"{folder}/body.html"


def mail_render(*, template: str, context: dict, recipient) -> RenderedMail:
    """The three parts of `template` for `recipient` (context gains `recipient`, `time_zone`,
    `base_url` and `profile_url`, where opting out is); datetimes show in the recipient's
    time zone."""
    subject_name, text_name, html_name = template_names(template)
    zone = recipient.timezone or "UTC"
    full = {**context, "recipient": recipient, "time_zone": zone, "base_url": base_url(),
            "profile_url": base_url() + reverse("profile")}
    with timezone.override(zone):
        engine = Engine.get_default()
        subject = engine.get_template(subject_name).render(Context(full, autoescape=False))
        text = engine.get_template(text_name).render(Context(full, autoescape=False))
        html = engine.get_template(html_name).render(Context(full))
    return RenderedMail(subject=" ".join(subject.split()), text=text.strip() + "\n", html=html)


def message_id(*, key: str, recipient_id: int) -> str:
    """The same Message-ID for every attempt at one (key, recipient): a copy sent again after
    an interrupted attempt is recognisably the same message."""
    digest = hashlib.sha256(f"{key}\0{recipient_id}".encode()).hexdigest()[:32]
    return f"<{digest}.{recipient_id}@{message_id_domain()}>"
