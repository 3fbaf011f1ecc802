"""`python -m agent`: options from the command line, environment (GPUQUOTA_AGENT_*) or a TOML file.

Precedence: command line, then environment, then the config file, then the defaults below.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any

from agent import __version__
from agent.enrol import EnrolError, enrol_if_needed
from agent.model import Backend, BackendNotReady, BackendUnavailable
from agent.owners import OwnerResolver
from agent.runner import Agent, Clock
from agent.sender import Sender, TokenError, TokenFile, run_sender
from agent.simulator import DEFAULT_ACCOUNTS, DEFAULT_USERS, Simulator
from agent.spool import Spool
from agent.windows import check_window_s

log = logging.getLogger("agent")

ENV_PREFIX = "GPUQUOTA_AGENT_"
EXIT_UNDELIVERED = 75  # EX_TEMPFAIL: --once spooled its batch but could not deliver it yet
FINAL_SEND_S = 5.0  # on shutdown, how long to try to deliver what is spooled
TIMEOUT_JOIN_S = 35.0  # a send in flight may take its full HTTP timeout
DEFAULTS: dict[str, Any] = {
    "server": None, "token_file": None, "bootstrap_file": None, "ca_file": None,
    "hostname": socket.gethostname(),
    "window": 60, "poll": 10.0, "spool_dir": None, "spool_max_mb": 512, "spool_max_days": 7.0,
    "keep_delivered_hours": 26.0,
    "send_jitter": 5.0, "once": False, "simulate": 0, "seed": 0,
    "simulate_model": "NVIDIA H100 80GB HBM3", "simulate_profiles": "",
    "simulate_users": ",".join(DEFAULT_USERS), "simulate_accounts": ",".join(DEFAULT_ACCOUNTS),
    "simulate_fail_after": 600.0, "simulate_borrowers_file": "", "proc_root": "/proc",
    "kubelet_pods_dir": "/var/lib/kubelet/pods", "log_level": "INFO", "nvml_retry": 60.0,
    "gpu_jobs_dir": "/run/gpuquota/gpu-jobs",
}


def parser() -> argparse.ArgumentParser:
    """The command line; every option can also come from the environment or the config file."""
    p = argparse.ArgumentParser(prog="python -m agent", argument_default=argparse.SUPPRESS,
                                description="gpuquota node agent: samples GPUs, sends batches.")
    p.add_argument("--config", help="TOML file whose keys are the option names (token_file...)")
    p.add_argument("--server", help="gpuquota base URL, e.g. https://gpuquota.example.org")
    p.add_argument("--token-file", help="file holding the node token (mode 0600)")
    p.add_argument("--bootstrap-file", help="file holding the cluster's bootstrap secret: with "
                   "an empty or missing token file, the agent enrols its node with it once and "
                   "writes the node token it receives to the token file")
    p.add_argument("--ca-file", help="CA bundle to verify the server's TLS certificate")
    p.add_argument("--hostname", help="node name reported to the server (default: this host's)")
    p.add_argument("--window", type=int, help="window length in s; divides 3600 (default 60)")
    p.add_argument("--poll", type=float, help="seconds between NVML polls (default 10)")
    p.add_argument("--spool-dir", help="where batches wait for delivery (default "
                   "/var/lib/gpuquota-agent/spool, or var/agent/HOSTNAME when simulating)")
    p.add_argument("--spool-max-mb", type=int, help="spool size cap in MiB (default 512)")
    p.add_argument("--spool-max-days", type=float, help="spool age cap in days (default 7)")
    p.add_argument("--keep-delivered-hours", type=float, help="keep delivered batches this long "
                   "in the spool's delivered/ folder, for a server restored from a dump "
                   "(default 26: a nightly dump and two hours; 0: delete them at once)")
    p.add_argument("--send-jitter", type=float, help="max random delay before sending, in s, "
                   "to spread a fleet's requests (default 5)")
    p.add_argument("--once", action="store_true", help="sample one window, send, exit")
    p.add_argument("--simulate", type=int, metavar="N", help="simulate N GPUs instead of NVML")
    p.add_argument("--seed", type=int, help="simulator seed; with the hostname it fixes the UUIDs")
    p.add_argument("--simulate-model", help="NVML model name(s), comma-separated, cycled")
    p.add_argument("--simulate-profiles", help="comma-separated: training, inference, notebook, "
                   "idle, xid79, mig (default: each once, then the first four)")
    p.add_argument("--simulate-users", help="comma-separated unix users of simulated processes")
    p.add_argument("--simulate-accounts", help="comma-separated Slurm accounts / namespaces")
    p.add_argument("--simulate-fail-after", type=float, help="seconds until the xid79 GPU is lost")
    p.add_argument("--simulate-borrowers-file", help="JSON {GPU UUID: unix user}: those GPUs "
                   "run that user's preemptible work (the demo's lent GPUs)")
    p.add_argument("--proc-root", help="the host's /proc (default /proc; a container needs "
                   "the host's PID namespace)")
    p.add_argument("--gpu-jobs-dir", help="where gpuquota's Slurm prolog records each GPU's job "
                   "(deploy/slurm/prolog.sh; default /run/gpuquota/gpu-jobs; '' to ignore)")
    p.add_argument("--kubelet-pods-dir", help="kubelet's pods folder, for pod namespaces")
    p.add_argument("--nvml-retry", type=float, help="while NVML cannot answer (driver not "
                   "loaded yet, an upgrade), seconds between tries (default 60)")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR")
    p.add_argument("--version", action="version", version=f"gpuquota-agent {__version__}")
    return p


def load_options(argv: list[str] | None, environ: dict[str, str]) -> dict[str, Any]:
    """The merged options; raises ValueError with a one-line reason when they cannot work."""
    cli = vars(parser().parse_args(argv))
    config_path = cli.pop("config", None) or environ.get(ENV_PREFIX + "CONFIG")
    options = dict(DEFAULTS)
    if config_path:
        try:
            options.update(tomllib.loads(Path(config_path).read_text()))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"cannot read config file {config_path}: {exc}") from None
    for key, default in DEFAULTS.items():
        raw = environ.get(ENV_PREFIX + key.upper())
        if raw is None:
            continue
        if isinstance(default, bool):
            options[key] = raw.lower() in ("1", "true", "yes")
            continue
        try:
            options[key] = type(default)(raw) if default is not None else raw
        except ValueError:
            raise ValueError(f"{ENV_PREFIX}{key.upper()}={raw!r} is not a valid "
                             f"{type(default).__name__}") from None
    options.update(cli)
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown option(s) in config: {', '.join(sorted(unknown))}")
    for required in ("server", "token_file"):
        if not options[required]:
            raise ValueError(f"--{required.replace('_', '-')} is required "
                             f"(or {ENV_PREFIX}{required.upper()}, or in the config file)")
    check_window_s(options["window"])
    if not options["nvml_retry"] > 0:
        raise ValueError("--nvml-retry must be a positive number of seconds")
    if not options["keep_delivered_hours"] >= 0:
        raise ValueError("--keep-delivered-hours must be 0 or more")
    if not options["spool_dir"]:
        options["spool_dir"] = (f"var/agent/{options['hostname']}" if options["simulate"]
                                else "/var/lib/gpuquota-agent/spool")
    return options


def make_backend(options: dict[str, Any], clock: Clock) -> Backend:
    """The simulator when asked for, NVML otherwise (raises BackendUnavailable without driver)."""
    if options["simulate"]:
        def names(key: str) -> tuple[str, ...]:
            return tuple(v.strip() for v in str(options[key]).split(",") if v.strip())
        return Simulator(
            options["simulate"], seed=options["seed"], hostname=options["hostname"],
            models=names("simulate_model"), profiles=names("simulate_profiles"),
            users=names("simulate_users"), accounts=names("simulate_accounts"),
            fail_after_s=options["simulate_fail_after"], clock=clock.now,
            borrowers_file=str(options["simulate_borrowers_file"] or ""),
            gpu_jobs_dir=str(options["gpu_jobs_dir"] or ""))
    from agent.nvml_backend import NvmlBackend  # only a real node needs pynvml loaded

    return NvmlBackend()


def read_boot_id(proc_root: str) -> str | None:
    """This boot's id: a new one tells the server that the node rebooted."""
    try:
        return Path(proc_root, "sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    """Run the agent until SIGTERM/SIGINT (or one window with --once); the exit status."""
    stop, wake = threading.Event(), threading.Event()

    def request_stop(signum: int, frame: Any) -> None:
        log.info("event=stopping signal=%s", signal.Signals(signum).name)
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        options = load_options(argv, dict(os.environ))
        logging.basicConfig(level=options["log_level"].upper(), stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s %(message)s")
        if not enrol_if_needed(server=options["server"], token_file=options["token_file"],
                               bootstrap_file=options["bootstrap_file"],
                               node_name=options["hostname"], ca_file=options["ca_file"],
                               wait=stop.wait):
            return 0  # stopped while waiting for the server
        token = TokenFile(options["token_file"])
        token.read()
        spool = Spool(options["spool_dir"], max_bytes=options["spool_max_mb"] * 2**20,
                      max_age_s=options["spool_max_days"] * 86400,
                      keep_delivered_s=options["keep_delivered_hours"] * 3600)
        clock = Clock()
        try:
            backend: Backend | None = make_backend(options, clock)
        except BackendNotReady:  # the agent reports it once and keeps trying
            backend = None
    except (ValueError, TokenError, EnrolError, BackendUnavailable, OSError) as exc:
        print(f"gpuquota-agent: {exc}", file=sys.stderr)
        return 2
    agent = Agent(backend=backend, spool=spool, hostname=options["hostname"],
                  owners=OwnerResolver(options["proc_root"], options["kubelet_pods_dir"],
                                       gpu_jobs_dir=options["gpu_jobs_dir"]),
                  boot_id=read_boot_id(options["proc_root"]), window_s=options["window"],
                  poll_s=options["poll"], clock=clock, on_spooled=wake.set,
                  connect=lambda: make_backend(options, clock), retry_s=options["nvml_retry"])
    sender = Sender(spool=spool, server=options["server"], token=token,
                    ca_file=options["ca_file"], clock=clock.now, node_status=agent.node_status)
    thread = None
    if not options["once"]:
        thread = threading.Thread(target=run_sender, name="sender", daemon=True, kwargs={
            "sender": sender, "stop": stop, "wake": wake, "jitter_s": options["send_jitter"],
            "wait": lambda s: clock.wait(s, stop)})
        thread.start()
        wake.set()  # whatever an earlier run left in the spool goes first
    try:
        agent.run(stop, once=options["once"])
    except BackendUnavailable as exc:
        print(f"gpuquota-agent: {exc}", file=sys.stderr)
        return 2
    finally:
        if agent.backend is not None:
            agent.backend.close()
        stop.set()
        wake.set()
        if thread is not None:
            thread.join(timeout=TIMEOUT_JOIN_S)
    delivered = _final_send(sender, clock)
    log.info("event=agent_stopped delivered_all=%s", delivered)
    return 0 if delivered or not options["once"] else EXIT_UNDELIVERED


def _final_send(sender: Sender, clock: Clock) -> bool:
    """A last, bounded attempt to deliver the spool; what is left waits for the next start."""
    deadline = clock.now() + FINAL_SEND_S
    give_up = threading.Event()
    return sender.drain(lambda s: clock.now() + s > deadline or clock.wait(s, give_up))
