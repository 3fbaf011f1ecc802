"""The schedulers' admin pages (admins only; the token write-only; bad input refused with
the reason), the binding level on the team page for leads, and problems on the admin's
home page."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from gpuquota.core.models import AuditEntry
from gpuquota.schedulers.models import BackendConfig, Problem, ReservationBinding, SlurmJob
from gpuquota.schedulers.selectors import foreign_use, foreign_use_period
from gpuquota.schedulers.services import backend_config_update
from tests.factories import MembershipFactory, UserFactory
from tests.schedulers import backend_memory as mem

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.parametrize("who", ["lead", "outsider", "anonymous"])
def test_scheduler_pages_are_for_admins_only(site, who):
    user = {"lead": User.objects.get(username="alice"), "outsider": UserFactory(),
            "anonymous": None}[who]
    client = client_for(user)
    slug = site.cluster.slug
    assert client.get("/schedulers/").status_code == 404
    assert client.get(f"/schedulers/{slug}/").status_code == 404
    assert client.post(f"/schedulers/{slug}/", {"mode": "write"}).status_code == 404
    assert client.post(f"/schedulers/{slug}/reconcile").status_code == 404
    assert client.get(f"/schedulers/{slug}/export/accounts.cfg").status_code == 404
    assert not BackendConfig.objects.exists()


def test_admin_configures_a_backend_the_token_is_never_shown_and_audited(memory_backend):
    client = client_for(memory_backend.admin)
    assert "dev" in client.get("/schedulers/").content.decode()
    url = f"/schedulers/{memory_backend.cluster.slug}/"
    response = client.post(url, {"mode": "export", "commands_dir": "/opt/slurm/bin",
                                 "token": "jwt-s3cret", "command_timeout_s": 20,
                                 "options": '{"loan_grace_s": 300}'})
    assert response.status_code == 302
    config = BackendConfig.objects.get()
    assert (config.mode, config.options) == ("export", {"loan_grace_s": 300})
    page = client.get(url).content.decode()
    assert "jwt-s3cret" not in page and "A token is stored (encrypted)" in page
    assert AuditEntry.objects.filter(action="scheduler_config_update",
                                     actor=memory_backend.admin).exists()


@pytest.mark.parametrize("options, message", [
    ("not json", "Not JSON"), ("[1]", "A JSON object"),
    ('{"gres_type": "h100"}', "Unknown Slurm option"),
    ('{"loan_grace_s": -1}', "loan_grace_s"),
])
def test_bad_options_are_refused_with_the_reason(memory_backend, options, message):
    response = client_for(memory_backend.admin).post(
        f"/schedulers/{memory_backend.cluster.slug}/",
        {"mode": "write", "command_timeout_s": 30, "options": options})
    assert response.status_code == 200 and message in response.content.decode()
    assert not BackendConfig.objects.exists()


@pytest.mark.parametrize("url, message", [
    ("slurmctl:6820", "Must start with http:// or https://"),
    ("ftp://slurmctl:6820", "Must start with http:// or https://"),
    ("http://:6820", "Must name a host"),
    ("http://root:pw@slurmctl:6820", "No credentials in the URL"),
    ("http://slurmctl:99999", "Not a URL"),
    ("http://slurmctl:6820/?token=x", "No query or fragment"),
])
def test_a_bad_rest_endpoint_is_refused_with_the_reason(memory_backend, url, message):
    response = client_for(memory_backend.admin).post(
        f"/schedulers/{memory_backend.cluster.slug}/",
        {"mode": "write", "command_timeout_s": 30, "options": "{}", "api_url": url})
    assert response.status_code == 200 and message in response.content.decode()
    assert not BackendConfig.objects.exists()


@pytest.mark.parametrize("url", ["http://slurmctl:6820", "https://10.0.0.5:6820/",
                                 "http://slurmctl.example.org:6820"])
def test_a_rest_endpoint_may_name_a_bare_host(memory_backend, url):
    """Clusters name their controllers with short host names, which Django's URL check
    refuses (it wants a domain)."""
    response = client_for(memory_backend.admin).post(
        f"/schedulers/{memory_backend.cluster.slug}/",
        {"mode": "write", "command_timeout_s": 30, "options": "{}", "api_url": url})
    assert response.status_code == 302
    assert BackendConfig.objects.get().api_url == url


def test_reconcile_and_dry_run_from_the_page_and_problems_shown(memory_backend):
    now = timezone.now()
    memory_backend.reserve("vision", memory_backend.gpus["node-a"], start=now - timedelta(hours=1),
                   end=now + timedelta(hours=2))
    backend_config_update(cluster=memory_backend.cluster, actor=memory_backend.admin)
    client = client_for(memory_backend.admin)
    reconcile = f"/schedulers/{memory_backend.cluster.slug}/reconcile"
    client.post(reconcile, {"dry_run": "1"})
    page = client.get(f"/schedulers/{memory_backend.cluster.slug}/").content.decode()
    assert "mem create hold" in page
    mem.DOWN[0] = True
    client.post(reconcile)
    page = client.get(f"/schedulers/{memory_backend.cluster.slug}/").content.decode()
    assert "the scheduler does not answer" in page and "connection refused" in page
    home = client.get("/").content.decode()
    assert "Scheduler problems" in home
    mem.DOWN[0] = False
    client.post(reconcile)
    assert not Problem.objects.filter(status="open").exists()
    assert ReservationBinding.objects.count() == 1


def test_leads_see_how_their_reservation_is_held_members_do_not(memory_backend):
    now = timezone.now()
    r = memory_backend.reserve("vision", memory_backend.gpus["node-a"],
                               start=now - timedelta(hours=1), end=now + timedelta(hours=2))
    ReservationBinding.objects.create(
        reservation=r, level="whole_nodes", why="Slurm 22.05.8 cannot reserve single GPUs; "
        "<b>node-a</b> whole", scheduler_object=f"gq-res-{r.pk}", updated_at=r.start)
    team_page = reverse("team_detail", args=["vision"])
    page = client_for(User.objects.get(username="alice")).get(team_page).content.decode()
    assert "How the scheduler holds your reservations" in page and "Whole nodes" in page
    assert "&lt;b&gt;node-a&lt;/b&gt;" in page  # escaped
    member = UserFactory()
    MembershipFactory(user=member, team=memory_backend.teams["vision"])
    assert "How the scheduler holds" not in client_for(member).get(team_page).content.decode()


def test_foreign_use_of_a_reserved_node_is_flagged_with_the_job(memory_backend):
    now = timezone.now()
    r = memory_backend.reserve("vision", memory_backend.gpus["node-a"],
                               start=now - timedelta(hours=3), end=now + timedelta(hours=2))
    ReservationBinding.objects.create(reservation=r, level="whole_nodes", why="node-a whole",
                                      updated_at=r.start)

    def job(job_id, account, qos, nodes="node-a,node-b", started=now - timedelta(hours=1)):
        return SlurmJob.objects.create(
            cluster=memory_backend.cluster, job_id=job_id, submitted_at=started, started_at=started,
            ended_at=None, state="RUNNING", account=account, user="u", qos=qos, nodes=nodes,
            gpu_tres="gres/gpu:h100=1", gpus=1)

    job("101", "speech", "normal")  # another account on the reserved node: flagged
    job("102", "vision", "gq-owner")  # the team's own
    job("103", "gq-lending", "gq-scavenger")  # a borrower on a lent GPU
    job("104", "speech", "normal", nodes="node-b")  # not on the reserved node
    job("105", "speech", "normal", started=now - timedelta(hours=5))  # before it held it
    SlurmJob.objects.filter(job_id="105").update(ended_at=now - timedelta(hours=4))
    assert [f.job for f in foreign_use(period=foreign_use_period(now))] == ["101"]

    lead_page = client_for(User.objects.get(username="alice")).get(
        reverse("team_detail", args=["vision"])).content.decode()
    assert 'id="foreign-use"' in lead_page and ">101<" in lead_page
    admin = client_for(memory_backend.admin)
    assert ">101<" in admin.get(f"/schedulers/{memory_backend.cluster.slug}/").content.decode()
    assert "Foreign GPU use this month" in admin.get("/").content.decode()
    review = admin.get(reverse("statement_review") + f"?month={now:%Y-%m}").content.decode()
    assert 'id="foreign-use"' in review
    cluster = memory_backend.cluster
    assert f'href="/schedulers/{cluster.slug}/?month={now:%Y-%m}">{cluster.name}: 1</a>' in review


def test_the_cluster_page_lists_the_first_bindings_and_foreign_uses_and_counts_all(
        memory_backend, monkeypatch):
    """A cluster of 10,000 GPUs holds about 900 reservations: the page lists the first
    LIST_ROWS of each list (here 1) and counts them all, in the same queries."""
    from gpuquota.schedulers import selectors

    now = timezone.now()
    for job_id, node in (("201", "node-a"), ("202", "node-b")):
        r = memory_backend.reserve("vision", memory_backend.gpus[node],
                                   start=now - timedelta(hours=3), end=now + timedelta(hours=2))
        ReservationBinding.objects.create(reservation=r, level="whole_nodes",
                                          why=f"{node} whole", updated_at=r.start)
        SlurmJob.objects.create(
            cluster=memory_backend.cluster, job_id=job_id, submitted_at=now - timedelta(hours=1),
            started_at=now - timedelta(hours=1), ended_at=None, state="RUNNING",
            account="speech", user="u", qos="normal", nodes=node, gpu_tres="gres/gpu:h100=1",
            gpus=1)
    page = f"/schedulers/{memory_backend.cluster.slug}/"
    admin = client_for(memory_backend.admin)
    html = admin.get(page).content.decode()
    assert "Binding of held reservations: 2" in html and "node-b whole" in html
    assert ">201<" in html and ">202<" in html and "listed" not in html
    monkeypatch.setattr(selectors, "LIST_ROWS", 1)
    html = admin.get(page).content.decode()
    assert "Binding of held reservations: 2" in html and 'id="bindings-listed"' in html
    assert "node-a whole" in html and "node-b whole" not in html  # the first by start
    assert ": 2</h2>" in html.split('id="foreign"')[1] and 'id="foreign-listed"' in html
    assert (">201<" in html) != (">202<" in html)
