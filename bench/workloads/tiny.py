"""The tests' workload: one node of 4 GPUs for a day. Team 0 trains on 2 GPUs for 3 h,
then idles, and comes back at 12:00 for 2 h (its GPUs are lent in between and must come
back); team 1 serves inference below the busy threshold all day (never idle: its process is
there); one GPU of team 0 fails from 18:00 to 20:00; the fourth GPU is unreserved."""

from bench.workloads import HOUR, Backlog, Failure, ReservationPlan, Run, Workload


def workload(*, days: int, seed: int) -> Workload:
    hours = days * 24
    training = [Run(0, 3 * HOUR, 95.0), Run(12 * HOUR, 14 * HOUR, 90.0)]
    return Workload(
        name="tiny", nodes=1, gpus_per_node=4, teams=2,
        reservations=[
            ReservationPlan(team=0, count=2, start_h=0, hours=hours, kind="training",
                            runs=[training, training]),
            ReservationPlan(team=1, count=1, start_h=0, hours=hours, kind="inference",
                            runs=[[Run(0, hours * HOUR, 3.0, memory_gib=12)]]),
        ],
        failures=[Failure(18 * HOUR, 20 * HOUR, reservation=0, gpu=1)],
        backlog=Backlog(job_hours=(1.0, 3.0), checkpoint_s=(600,)),
    )
