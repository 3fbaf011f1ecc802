"""Owners take a lent GPU back as they submit today: the default QOS of the users in a
team's accounts (the site's own, `normal`) is made to preempt gq-scavenger, and nothing
else of theirs changes; undone when gpuquota no longer needs it."""

from types import SimpleNamespace

import pytest

from gpuquota.schedulers.backend import Observed, backend_for
from gpuquota.schedulers.models import BackendConfig, ManagedObject
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm.owners import owners_default_qos, site_qos_parse
from tests.schedulers.conftest import NOW
from tests.schedulers.test_slurm_plan import caps

# `sacctmgr -P -n show association format=account,user,grptres,qos,defaultqos`: vision's
# users carry their own default (normal, or a site's `gpu`), speech's user inherits its
# account's.
ASSOCS = ("root|||normal|normal\nsite||||\nvision||||\nvision|daemon||normal,gpu|normal\n"
          "vision|eve||gpu|gpu\nspeech|||gq-owner|gq-owner\nspeech|bob|||\n"
          "nlp|nobody||normal|normal\n")
QOS = ("normal||cluster|00:00:00|\nscavenger||cancel|00:00:00|\n"
       "gq-owner|gq-scavenger|cluster|00:00:00|\n")


def test_the_owners_default_qos_is_their_own_or_their_accounts():
    assert owners_default_qos(ASSOCS, {"vision", "speech"}) == ["gpu", "normal"]
    assert owners_default_qos(ASSOCS, {"speech"}) == []  # gq-owner preempts already


class Answers:
    def __init__(self, **by_command):
        self.by_command = by_command
        self.ran = []

    def run(self, argv, **kwargs):
        self.ran.append(argv)
        return SimpleNamespace(stdout=self.by_command.get(argv[4], ""))


@pytest.mark.django_db
def test_the_site_qos_is_made_to_preempt_the_scavenger_and_given_back(site):
    backend_config_update(cluster=site.cluster, actor=site.admin)
    site.reserve("vision", site.gpus["node-a"][:1])
    site.reserve("speech", site.gpus["node-a"][1:2])
    backend = backend_for(site.cluster, BackendConfig.objects.get())
    object.__setattr__(backend, "runner", Answers(association=ASSOCS))
    plan = backend.plan(NOW, capabilities=caps())
    actions = backend.diff(plan, Observed(site_qos_parse(QOS)))
    site_qos = [a for a in actions if a.obj.kind == "site_qos"]
    assert backend.render(site_qos) == [
        "sacctmgr -i modify qos where name=gpu set preempt+=gq-scavenger",
        "sacctmgr -i modify qos where name=normal set preempt+=gq-scavenger"]
    # In place: nothing to do. Another site QOS that preempts it is the site's own.
    done = QOS.replace("normal||", "normal|gq-scavenger|") + "gpu|gq-scavenger|c|0|\n" \
        "urgent|gq-scavenger,low|c|0|\n"
    assert [a for a in backend.diff(plan, Observed(site_qos_parse(done)))
            if a.obj.kind == "site_qos"] == []
    # No team's users default to `normal` any more: what gpuquota added is taken back,
    # and the site's own (urgent) stays.
    ManagedObject.objects.create(cluster=site.cluster, kind="site_qos", name="normal",
                                 fields={"preempts": "gq-scavenger"}, applied_at=NOW,
                                 created=True)  # gpuquota added it (preempt+=)
    backend = backend_for(site.cluster, BackendConfig.objects.get())  # what it created, read
    object.__setattr__(backend, "runner", Answers(association=ASSOCS.replace(
        "normal,gpu|normal", "normal,gpu|gpu")))
    plan = backend.plan(NOW, capabilities=caps())
    undo = [a for a in backend.diff(plan, Observed(site_qos_parse(done)))
            if a.obj.kind == "site_qos"]
    assert backend.render(undo) == [
        "sacctmgr -i modify qos where name=normal set preempt-=gq-scavenger"]
    # A cluster that cannot preempt gets no such change (and is not lent).
    plan = backend.plan(NOW, capabilities=caps(preempt_type="preempt/partition_prio"))
    assert not [o for o in plan.objects if o.kind == "site_qos"]
