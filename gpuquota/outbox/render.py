"""One message, three shapes: a Slack incoming webhook's Block Kit, a Microsoft Teams
Workflows webhook's Adaptive Card (the retired Office 365 connectors' MessageCard is not
used), and a generic webhook's JSON event. Each stays inside its receiver's limits, cut
with an ellipsis rather than refused (Slack: header 150 characters, a section 3000, ten
fields of 2000, fifty blocks; the text fallback 4000)."""

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

SLACK_HEADER, SLACK_SECTION, SLACK_FIELD, SLACK_FIELDS = 150, 3000, 2000, 10


@dataclass(frozen=True)
class Message:
    """What a notification says, whatever the channel: its event type (`budget.threshold`),
    a title, a sentence, facts shown as label/value, a link, and the machine-readable data
    a webhook receiver gets."""

    event: str
    title: str
    text: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    link: str = ""
    data: dict = field(default_factory=dict)


def when_utc(value: datetime) -> str:
    """An instant as channel messages print it (a team's channel has no viewer's time zone):
    `2026-12-01 16:00 UTC`."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_body(message: Message) -> dict:
    blocks: list[dict] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(message.title,
                                                                        SLACK_HEADER)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(message.text,
                                                                     SLACK_SECTION)}},
    ]
    if message.facts:
        blocks.append({"type": "section", "fields": [
            {"type": "mrkdwn", "text": _cut(f"*{label}*\n{value}", SLACK_FIELD)}
            for label, value in message.facts[:SLACK_FIELDS]]})
    if message.link:
        blocks.append({"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "Open in gpuquota"},
             "url": message.link}]})
    return {"text": _cut(f"{message.title}: {message.text}", 4000), "blocks": blocks}


def teams_body(message: Message) -> dict:
    card: dict = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard", "version": "1.4",
        "body": [
            {"type": "TextBlock", "text": message.title, "weight": "Bolder", "size": "Medium",
             "wrap": True},
            {"type": "TextBlock", "text": message.text, "wrap": True},
        ],
    }
    if message.facts:
        card["body"].append({"type": "FactSet", "facts": [
            {"title": label, "value": value} for label, value in message.facts]})
    if message.link:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open in gpuquota",
                            "url": message.link}]
    return {"type": "message", "attachments": [
        {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
         "content": card}]}


def webhook_body(message: Message, *, at: datetime) -> dict:
    return {"type": message.event, "timestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "data": {**message.data, "title": message.title, "text": message.text,
                     "link": message.link}}


def body_render(kind: str, message: Message, *, at: datetime) -> str:
    """The exact JSON text sent (and, for a webhook, signed) to a channel of `kind`."""
    shape = {"slack": slack_body, "teams": teams_body}.get(kind)
    body = shape(message) if shape else webhook_body(message, at=at)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)
