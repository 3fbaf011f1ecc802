"""`python -m agent`: options, refusals at start, and one --once run against a server."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import EXIT_UNDELIVERED, load_options, main

ROOT = Path(__file__).resolve().parents[2]


def test_command_line_beats_environment_beats_config_file(tmp_path):
    config = tmp_path / "agent.toml"
    config.write_text('server = "https://from-file"\ntoken_file = "/etc/t"\nwindow = 300\n'
                      'poll = 5.0\n')
    env = {"GPUQUOTA_AGENT_CONFIG": str(config), "GPUQUOTA_AGENT_WINDOW": "120"}
    options = load_options(["--poll", "2"], env)
    assert options["server"] == "https://from-file" and options["token_file"] == "/etc/t"
    assert options["window"] == 120 and options["poll"] == 2.0
    assert options["spool_dir"] == "/var/lib/gpuquota-agent/spool"


def test_the_shipped_config_file_loads_and_retry_must_be_positive():
    options = load_options(["--config", str(ROOT / "deploy/agent/agent.toml")], {})
    assert (options["server"], options["nvml_retry"]) == ("https://gpuquota.example.org", 60.0)
    with pytest.raises(ValueError, match="--nvml-retry must be a positive"):
        load_options(["--server", "u", "--token-file", "t", "--nvml-retry", "0"], {})


def test_a_simulated_node_spools_under_var_by_default():
    options = load_options(["--server", "u", "--token-file", "t", "--simulate", "2",
                            "--hostname", "h7"], {})
    assert options["spool_dir"] == "var/agent/h7"


@pytest.mark.parametrize(("argv", "message"), [
    (["--token-file", "t"], "--server is required"),
    (["--server", "https://q"], "--token-file is required"),
    (["--server", "u", "--token-file", "t", "--window", "7"], "must divide 3600"),
])
def test_missing_or_impossible_options_are_named(argv, message):
    with pytest.raises(ValueError, match=message):
        load_options(argv, {})


def test_a_config_file_with_an_unknown_key_is_refused(tmp_path):
    config = tmp_path / "agent.toml"
    config.write_text('server = "u"\ntoken_file = "t"\nwindow_seconds = 5\n')
    with pytest.raises(ValueError, match="window_seconds"):
        load_options(["--config", str(config)], {})


def test_a_group_readable_token_file_stops_the_agent_with_one_line(token_file, capsys):
    token_file.chmod(0o640)
    assert main(["--server", "http://127.0.0.1:9", "--token-file", str(token_file),
                 "--simulate", "1", "--spool-dir", str(token_file.parent / "s")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "chmod 600" in err


def run_once(server_url, token_file, tmp_path):
    return subprocess.run(
        [sys.executable, "-m", "agent", "--server", server_url, "--token-file", str(token_file),
         "--simulate", "8", "--seed", "4", "--hostname", "demo-01", "--window", "1",
         "--poll", "0.5", "--once", "--spool-dir", str(tmp_path / "spool")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=30)


def test_once_samples_one_window_sends_it_and_exits(tmp_path, protocol_server, token_file):
    result = run_once(protocol_server.url, token_file, tmp_path)
    assert result.returncode == 0, result.stderr
    assert [status for _, status in protocol_server.requests] == [202]
    assert len(protocol_server.samples) == 10  # 8 GPUs and the two MIG devices of one
    assert "event=batch_sent" in result.stderr


def test_once_with_the_server_unreachable_keeps_the_batch_and_says_so(tmp_path, token_file):
    result = run_once("http://127.0.0.1:9", token_file, tmp_path)
    assert result.returncode == EXIT_UNDELIVERED
    assert len(list((tmp_path / "spool").glob("*.json"))) == 1
