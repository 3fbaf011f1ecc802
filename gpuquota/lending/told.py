"""What lending tells the teams' channels (`gpuquota.core.contributions.team_event`): the
owning team, when one of its reserved GPUs is lent and when it comes back (and why); the
borrowing teams, in the digest of GPUs taken back (`gpuquota.lending.notify`). Mail keeps
the digest only: a lead's inbox is not the place for every loan."""

from django.urls import reverse

from gpuquota.core.contributions import team_event
from gpuquota.mail.conf import base_url
from gpuquota.outbox.render import Message, when_utc
from gpuquota.reservations.models import Loan


def _gpu(loan: Loan) -> str:
    return f"{loan.gpu.node.hostname}/{loan.gpu.index}"


def loan_lent_tell(loan: Loan) -> None:
    """In the lending transaction: the owning team hears that its idle GPU was lent."""
    reservation = loan.assignment.reservation
    team_event(team_id=reservation.team_id, key=f"loan:{loan.pk}:lent", message=Message(
        event="loan.lent",
        title=f"{reservation.team.name}: GPU {_gpu(loan)} lent",
        text=(f"GPU {_gpu(loan)} of reservation #{reservation.pk} was idle and is lent from "
              f"{when_utc(loan.lent_from)}; it comes back when your team submits work to it "
              "or asks for it."),
        facts=[("GPU", f"{_gpu(loan)} ({loan.gpu.uuid})"), ("Lent from", when_utc(loan.lent_from)),
               ("Why", loan.lend_reason or "idle for the lending window")],
        link=base_url() + reverse("team_detail", args=[reservation.team.slug]),
        data={"loan": loan.pk, "team": reservation.team.slug, "reservation": reservation.pk,
              "gpu": loan.gpu.uuid, "lent_from": loan.lent_from.isoformat()}))


def loan_returned_tell(loan: Loan) -> None:
    """In the return's transaction: the owning team hears that its GPU is back, and why."""
    reservation = loan.assignment.reservation
    reason = Loan.EndReason(loan.end_reason).label
    team_event(team_id=reservation.team_id, key=f"loan:{loan.pk}:returned", message=Message(
        event="loan.returned",
        title=f"{reservation.team.name}: GPU {_gpu(loan)} returned",
        text=(f"GPU {_gpu(loan)} of reservation #{reservation.pk}, lent from "
              f"{when_utc(loan.lent_from)}, was returned at {when_utc(loan.returned_at)}: "
              f"{reason.lower()}. Borrowers still on it are preempted."),
        facts=[("GPU", f"{_gpu(loan)} ({loan.gpu.uuid})"),
               ("Returned", when_utc(loan.returned_at)), ("Why", reason)],
        link=base_url() + reverse("team_detail", args=[reservation.team.slug]),
        data={"loan": loan.pk, "team": reservation.team.slug, "reservation": reservation.pk,
              "gpu": loan.gpu.uuid, "lent_from": loan.lent_from.isoformat(),
              "returned_at": loan.returned_at.isoformat(), "reason": loan.end_reason}))


def borrowers_preempted_tell(*, team, loans: list[Loan], key: str) -> None:
    """With the borrowers' digest mail: the borrowing team hears which GPUs were taken back."""
    gpus = ", ".join(_gpu(loan) for loan in loans)
    team_event(team_id=team.pk, key=key, message=Message(
        event="loan.preempted",
        title=f"{team.name}: {len(loans)} borrowed GPU(s) taken back",
        text=(f"The owners took back {gpus}; work of {team.name} still running on them was "
              "preempted (requeued where the scheduler allows it)."),
        facts=[(_gpu(loan), f"{loan.assignment.reservation.team.name}, returned "
                f"{when_utc(loan.returned_at)}") for loan in loans[:10]],
        link=base_url() + reverse("team_detail", args=[team.slug]),
        data={"team": team.slug, "returns": [
            {"gpu": loan.gpu.uuid, "owner": loan.assignment.reservation.team.slug,
             "returned_at": loan.returned_at.isoformat(), "reason": loan.end_reason}
            for loan in loans]}))
