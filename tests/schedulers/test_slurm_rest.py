"""The slurmrestd client against a local HTTP server answering what slurmrestd 22.05 answers
(shapes taken from the dev cluster's slurmrestd): the JWT headers, the parsers of its jobs,
every failure becoming a BackendError (a cluster problem in the job import), and what
the cluster page says of it."""

import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from gpuquota.core.errors import DomainError
from gpuquota.schedulers.backend import BackendError
from gpuquota.schedulers.models import Capabilities, Problem, SlurmJob
from gpuquota.schedulers.services import backend_config_update
from gpuquota.schedulers.slurm.capabilities import capabilities_report
from gpuquota.schedulers.slurm.jobs import job_fields, slurm_clusters_accounting_import
from gpuquota.schedulers.slurm.objects import gres_indices
from gpuquota.schedulers.slurm.options import SlurmOptions
from gpuquota.schedulers.slurm.rest import SlurmRest
from tests.helpers import free_port

META = {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
        "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}


def _running(job_id, nodes, allocated, gres, state="RUNNING"):
    return {"job_id": job_id, "job_state": state, "nodes": nodes, "gres_detail": gres,
            "account": "vision", "user_name": "daemon",
            "job_resources": {"nodes": nodes, "allocated_nodes": [
                {"nodename": n, "cpus_used": 0} for n in allocated]}}


def _accounted(job_id, *, reservation=None, account="vision"):
    """A job slurmdbd accounted: submitted and started a minute before the test's now (the
    import reads a window back from now), ended two seconds later."""
    at = int(timezone.now().timestamp()) - 60
    return {
        "job_id": job_id, "account": account, "user": "daemon", "partition": "gpu",
        "qos": "normal", "nodes": "gqnode2", "state": {"current": "COMPLETED", "reason": "None"},
        "time": {"elapsed": 2, "eligible": at, "end": at + 2, "start": at, "submission": at},
        "reservation": reservation or {"id": 0, "name": 0},
        "tres": {"allocated": [{"type": "cpu", "name": None, "id": 1, "count": 1},
                               {"type": "gres", "name": "gpu", "id": 1001, "count": 2},
                               {"type": "gres", "name": "gpu:h100", "id": 1002, "count": 2}]},
        "steps": [{"nodes": {"list": ["gqnode2"]}, "tres": {"allocated": []}}],
    }


class FakeRestd:
    """Answers `routes[path] = (status, body, delay_s)`; `body` a dict is sent as JSON."""

    def __init__(self):
        self.routes: dict[str, tuple[int, object, float]] = {}
        self.requests: list[tuple[str, dict, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlsplit(self.path)
                fake.requests.append((url.path, parse_qs(url.query), dict(self.headers)))
                status, body, delay_s = fake.routes.get(url.path, (404, "Unable find URL", 0))
                time.sleep(delay_s)
                data = (json.dumps(body) if isinstance(body, dict) else body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def restd():
    fake = FakeRestd()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def _client(url, token="tok-123", timeout_s=5):
    return SlurmRest(url=url, user="root", token=token, timeout_s=timeout_s)


@pytest.mark.parametrize("text, indices", [
    ("gpu:h100:2(IDX:0,2-3)", (0, 2, 3)),
    ("gpu:h100:2(IDX:2-3)", (2, 3)),
    ("gpu:1(IDX:1)", (1,)),
    ("gpu:a100:1(IDX:0),gpu:v100:1(IDX:3)", (0, 3)),
    ("gpu:h100:1(S:0)(IDX:5)", (5,)),
    ("GRES=gpu:h100:2(IDX:6-7)", (6, 7)),
    ("gpu(IDX:N/A)", ()),
    ("mps:100(IDX:0)", ()),
    ("", ()),
])
def test_gres_indices(text, indices):
    assert gres_indices(text) == indices


def test_the_jwt_goes_in_headers_and_the_version_comes_from_the_ping(restd):
    restd.routes["/slurm/v0.0.38/ping"] = (200, {"meta": META, "errors": [], "pings": []}, 0)
    assert SlurmRest(url=restd.url + "/", user="gq", token="tok-123",
                     timeout_s=5).version() == "22.05.8"
    path, _query, headers = restd.requests[0]
    assert path == "/slurm/v0.0.38/ping"
    assert (headers["X-SLURM-USER-NAME"], headers["X-SLURM-USER-TOKEN"]) == ("gq", "tok-123")


def test_running_job_gpus_one_entry_per_node_in_node_order(restd):
    restd.routes["/slurm/v0.0.38/jobs"] = (200, {"meta": META, "errors": [], "jobs": [
        _running(3, "gqnode[1-2]", ["gqnode1", "gqnode2"],
                 ["gpu:h100:2(IDX:2-3)", "gpu:h100:2(IDX:0-1)"]),
        _running(4, "gqnode2", [], ["gpu:h100:1(IDX:3)"]),  # no allocated_nodes: from `nodes`
        _running(5, "gqnode1", ["gqnode1"], [""]),  # no GPU
        _running(6, "", [], [], state="PENDING"),
        _running(7, "gqnode1", ["gqnode1"], ["gpu:h100:1(IDX:1)"], state="COMPLETED"),
    ]}, 0)
    assert [(g.job_id, g.account, g.user, g.node, g.index)
            for g in _client(restd.url).running_job_gpus()] == [
        ("3", "vision", "daemon", "gqnode1", 2), ("3", "vision", "daemon", "gqnode1", 3),
        ("3", "vision", "daemon", "gqnode2", 0), ("3", "vision", "daemon", "gqnode2", 1),
        ("4", "vision", "daemon", "gqnode2", 3)]


def test_accounting_jobs_asks_slurmdbd_for_the_window_relative_to_its_clock(restd):
    restd.routes["/slurmdb/v0.0.38/jobs"] = (
        200, {"meta": META, "errors": [], "jobs": [_accounted(4)]}, 0)
    jobs = _client(restd.url).accounting_jobs(timezone.now() - timedelta(hours=2))
    assert [j["job_id"] for j in jobs] == [4]
    _path, query, _headers = restd.requests[0]
    assert query["end_time"] == ["now"]
    seconds = int(query["start_time"][0].removeprefix("now-").removesuffix("seconds"))
    assert 7199 <= seconds <= 7202


def test_job_fields_reads_slurmrestd_jobs_and_names_reservations():
    fields = job_fields(_accounted(4, reservation={"id": 1, "name": 0}), {"1": "gq-res-7"})
    assert (fields["job_id"], fields["state"], fields["gpu_tres"], fields["gpus"],
            fields["reservation"]) == ("4", "COMPLETED", "gres/gpu:h100=2", 2, "gq-res-7")
    # Later API versions print the name itself.
    named = job_fields(_accounted(4, reservation={"id": 1, "name": "gq-res-8"}), {})
    assert named["reservation"] == "gq-res-8"
    assert job_fields(_accounted(5), {"1": "gq-res-7"})["reservation"] == ""


@pytest.mark.parametrize("status, body, message", [
    # A wrong token: slurmctld refuses it (HTTP 500), slurmdbd answers 200 with errors.
    (500, {"meta": META, "errors": [{"description": "slurmctld config is unable to load",
                                     "error_number": -1, "source": "slurm_load_ctl_conf"}]},
     "slurmrestd answered an error: slurmctld config is unable to load (slurm_load_ctl_conf)"),
    (200, {"meta": META, "errors": [{"error_number": 1007, "error":
                                     "Protocol authentication error",
                                     "source": "slurmdb_jobs_get"}], "jobs": []},
     "slurmrestd answered an error: Protocol authentication error (slurmdb_jobs_get)"),
    (401, "Authentication failure", "slurmrestd answered HTTP 401: Authentication failure"),
    (503, {"meta": META, "errors": []}, "slurmrestd answered HTTP 503: Service Unavailable"),
    (200, "<html>a proxy's page</html>", "slurmrestd answered something that is not a JSON"),
    (200, {"meta": META, "errors": []}, "slurmrestd's job accounting has no list of jobs"),
])
def test_bad_answers_are_backend_errors_with_the_answer(restd, status, body, message):
    restd.routes["/slurmdb/v0.0.38/jobs"] = (status, body, 0)
    with pytest.raises(BackendError) as caught:
        _client(restd.url).accounting_jobs(timezone.now())
    assert caught.value.message.startswith(message)
    assert "GET http://127.0.0.1" in caught.value.detail and "tok-123" not in caught.value.detail


def test_unreachable_slow_or_tokenless_slurmrestd_is_a_backend_error(restd):
    with pytest.raises(BackendError, match="could not be reached at http://127.0.0.1:"):
        _client(f"http://127.0.0.1:{free_port()}").version()
    restd.routes["/slurm/v0.0.38/ping"] = (200, {"meta": META, "errors": []}, 2)
    with pytest.raises(BackendError, match="did not answer within 0.5 s"):
        _client(restd.url, timeout_s=0.5).version()
    with pytest.raises(BackendError, match="needs a token"):
        _client(restd.url, token="").version()
    assert len(restd.requests) == 1  # no request without a token


def test_rest_user_option():
    assert SlurmOptions.parse({}).rest_user == "root"
    assert SlurmOptions.parse({"rest_user": "slurm"}).rest_user == "slurm"
    with pytest.raises(DomainError, match="rest_user"):
        SlurmOptions.parse({"rest_user": ""})


def test_job_import_reads_through_slurmrestd_and_a_failure_is_a_cluster_problem(site, restd):
    restd.routes["/slurmdb/v0.0.38/jobs"] = (200, {"meta": META, "errors": [], "jobs": [
        _accounted(4, reservation={"id": 1, "name": "gq-res-8"}),
        _accounted(5, account="speech")]}, 0)
    backend_config_update(cluster=site.cluster, actor=site.admin, api_url=restd.url,
                          token="tok-123", options={"rest_user": "gq"})
    assert slurm_clusters_accounting_import() == {"dev": {"jobs": 2, "returns": 0}}
    assert restd.requests[0][2]["X-SLURM-USER-NAME"] == "gq"
    jobs = {j.job_id: j for j in SlurmJob.objects.filter(cluster=site.cluster)}
    assert (jobs["4"].team, jobs["4"].reservation, jobs["4"].gpus) == (
        site.teams["vision"], "gq-res-8", 2)
    assert jobs["5"].team == site.teams["speech"]

    backend_config_update(cluster=site.cluster, actor=site.admin,
                          api_url=f"http://127.0.0.1:{free_port()}")
    done = slurm_clusters_accounting_import()
    assert done["dev"]["error"].startswith("slurmrestd could not be reached")
    problem = Problem.objects.get(cluster=site.cluster, status=Problem.Status.OPEN)
    assert problem.summary.startswith("job import: slurmrestd could not be reached")


def test_an_unfinished_job_not_answered_again_is_re_read_by_id_through_slurmrestd(site, restd):
    # the same job (one submission instant) running, then answered again by id completed: two
    # calls of `_accounted` a second apart on the ticking clock were two jobs (a CI failure)
    completed = _accounted(6)
    running = {**completed, "state": {**completed["state"], "current": "RUNNING"},
               "time": {**completed["time"], "end": 0}}
    restd.routes["/slurmdb/v0.0.38/jobs"] = (200, {"meta": META, "errors": [],
                                                  "jobs": [running]}, 0)
    backend_config_update(cluster=site.cluster, actor=site.admin, api_url=restd.url,
                          token="tok-123")
    slurm_clusters_accounting_import()
    restd.routes["/slurmdb/v0.0.38/jobs"] = (200, {"meta": META, "errors": [], "jobs": []}, 0)
    restd.routes["/slurmdb/v0.0.38/job/6"] = (200, {"meta": META, "errors": [],
                                                   "jobs": [completed]}, 0)
    assert slurm_clusters_accounting_import() == {"dev": {"jobs": 1, "returns": 0}}
    assert SlurmJob.objects.get(job_id="6").state == "COMPLETED"


def test_the_capability_report_says_which_transport_reads_jobs():
    config = {"version": "22.05.8", "enforce": "limits", "tres": "gres/gpu,gres/gpu:h100"}
    assert capabilities_report(config, {}).facts["jobs_read_through"] == "sacct --json"
    url = "http://slurm.example.org:6820"
    report = capabilities_report(config, {}, rest_url=url,
                                 rest_error=f"slurmrestd could not be reached at {url}")
    assert report.facts["jobs_read_through"] == f"slurmrestd {url}"
    assert f"Jobs cannot be imported until slurmrestd answers: slurmrestd could not be " \
        f"reached at {url}." in report.notes


def test_the_cluster_page_shows_the_transport_and_what_goes_through_rest(site):
    backend_config_update(cluster=site.cluster, actor=site.admin, api_url="http://slurm.example.org:6820")
    Capabilities.objects.create(cluster=site.cluster, detected_at=timezone.now(),
                                version="22.05.8", facts={
                                    "jobs_read_through": "slurmrestd http://slurm.example.org:6820"})
    client = Client()
    client.force_login(site.admin)
    page = client.get(f"/schedulers/{site.cluster.slug}/").content.decode()
    assert "Jobs read through</th><td>slurmrestd http://slurm.example.org:6820" in page
    assert "every write stays on the commands" in page
    refused = client.post(f"/schedulers/{site.cluster.slug}/", {
        "mode": "write", "command_timeout_s": 30, "options": '{"rest_user": ""}'})
    assert refused.status_code == 200 and "rest_user: a Slurm user name." in \
        refused.content.decode()
