"""What reliability tells the platform admins' channels
(`gpuquota.core.contributions.admin_event`): a node drained for a GPU's failure, reserved
or not (the teams whose reservations it held hear of the move from `replace.py`)."""

from django.urls import reverse

from gpuquota.core.contributions import admin_event
from gpuquota.mail.conf import base_url
from gpuquota.outbox.render import Message, when_utc
from gpuquota.reliability.models import Drain


def drain_tell(drain: Drain) -> None:
    """In the drain's transaction: the admins' channels hear that a node was drained (or
    that the scheduler refused), once per drain."""
    node, gpu = drain.node, drain.gpu
    where = f"{node.hostname}/{gpu.index}"
    outcome = {Drain.State.DRAINED: "drained on the scheduler",
               Drain.State.RECORDED: "recorded (no scheduler backend writes for the cluster)",
               Drain.State.REFUSED: f"the scheduler refused the drain: {drain.error}"}[drain.state]
    admin_event(key=f"drain:{drain.pk}:admins", message=Message(
        event="gpu.drained", title=f"Node {node.hostname} drained: GPU {where} {drain.reason}",
        text=(f"GPU {where} failed ({drain.reason}) at {when_utc(drain.event_at)}; its node "
              f"{node.hostname} is {outcome}" + (", after its running jobs" if drain.after_jobs
                                                 else "") + "."),
        facts=[("GPU", f"{where} ({gpu.uuid})"), ("Failure", drain.reason),
               ("At", when_utc(drain.event_at)), ("Back after", drain.needs),
               ("State", drain.get_state_display())],
        link=base_url() + reverse("node_detail", args=[node.pk]),
        data={"drain": drain.pk, "node": node.hostname, "cluster": node.cluster.slug,
              "gpu": gpu.uuid, "reason": drain.reason, "needs": drain.needs,
              "state": drain.state, "after_jobs": drain.after_jobs}))
