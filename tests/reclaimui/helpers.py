"""Helpers of the reclaim page tests: sign-in per role, messages, the lifecycle steps."""

from reclaim import lifecycle
from reclaim.models import Recommendation

NOT_ADMINS = ["lead", "other_lead", "member", "outsider"]


def login(client, roles, role):
    if role != "anonymous":
        client.force_login(getattr(roles, role))


def body_of(response) -> str:
    return response.content.decode()


def messages_of(response) -> str:
    return " ".join(str(m) for m in response.context["messages"]) if response.context else ""


def as_each(client, roles, role_names):
    """Sign in as each role in turn."""
    for role in role_names:
        client.logout()
        login(client, roles, role)
        yield role


def accepted(rec, roles) -> Recommendation:
    return lifecycle.recommendation_accept(recommendation=rec, actor=roles.admin)


def objected(rec, roles) -> Recommendation:
    accepted(rec, roles)
    return lifecycle.recommendation_object(recommendation=rec, actor=roles.lead,
                                           reason="eval job tonight")
