"""The three-day history that the day rows' and the fleet rows' tests both check: over
three UTC days and two more hours, a GPU reserved by "vision" for 40 h (busy by day), one
unreserved used by a user of "ml", one of them split with a user of "vision" for a while,
and one failed for 5 h across midnight; all swept."""

from datetime import UTC, datetime, timedelta

from gpuquota.inventory.models import GpuHealthInterval
from gpuquota.usage.sweep import dirty_hours_process
from tests.factories import NodeFactory, TeamFactory, make_gpu
from tests.usage.factories import add_processes, add_samples, reserve, team_with_user

H, M = timedelta(hours=1), timedelta(minutes=1)
D0 = datetime(2026, 10, 29, 22, 0, tzinfo=UTC)  # two hours before Oct 30
NOW = datetime(2026, 11, 1, 1, 40, tzinfo=UTC)  # today's second hour, two thirds done
SAMPLES = 6 * 51 + 4  # ten-minute windows from D0 to NOW


def ten_minutes(gpu, start: datetime, count: int, util) -> None:
    add_samples(gpu, [{"start": start + 10 * i * M, "seconds": 600, "util": util(i)}
                      for i in range(count)])


def sweep() -> None:
    while dirty_hours_process():
        pass


def three_days_history():
    """(the "vision" team, the "ml" team, the reserved GPU) of the history above."""
    node = NodeFactory()
    team = TeamFactory(slug="vision")
    ml, _ = team_with_user("ml", "alice", node.cluster)
    team_with_user("vision-users", "bob", node.cluster)
    reserved, used, failing = (make_gpu(node=node, index=i, at=D0 - H) for i in range(3))
    ten_minutes(reserved, D0, SAMPLES, lambda i: 80 if (i // 6) % 24 < 12 else 2)
    reserve(team, reserved, D0 + 5 * H + 20 * M, D0 + 45 * H + 20 * M)
    ten_minutes(used, D0, SAMPLES, lambda i: 10 + i % 60)
    add_processes(used, D0 + 3 * H, 30 * 60, user="alice")
    add_processes(used, D0 + 20 * H, 3 * 60, user="bob", pid=300)
    ten_minutes(failing, D0, SAMPLES, lambda i: 95)
    GpuHealthInterval.objects.create(gpu=failing, state="failed", reason="xid 79",
                                     valid_from=D0 + 23 * H, valid_until=D0 + 28 * H)
    sweep()
    return team, ml, reserved
