"""Every failure while `dmpo train` starts is one line and a status: run.json "failed" with the
reason when the run folder exists, no folder at all when nothing was written yet."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from dmpo.cli.main import main
from test_faults import TINY

FLAGS = ["--env", "gym:Pendulum-v1", "--steps", "200", "--eval-every", "0", "--no-progress", *TINY]


def run_cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert "Traceback" not in output, output
    return exit_info.value.code, [line for line in output.splitlines() if line.startswith("dmpo: error")]


def status_of(run: Path) -> tuple[str, str]:
    info = json.loads((run / "run.json").read_text())
    return info["status"], info.get("status_reason") or ""


def test_an_mlflow_file_store_that_is_not_allowed_fails_the_run_in_one_line(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    run = tmp_path / "run"
    code, errors = run_cli(["train", *FLAGS, "--track", "mlflow", "--run-dir", str(run)], capsys)
    assert code == 1
    assert len(errors) == 1 and errors[0].startswith(
        "dmpo: error: --track mlflow: the tracker could not start (MlflowException: "), errors
    status, reason = status_of(run)
    assert status == "failed"
    assert reason.startswith("TrackerError: --track mlflow: the tracker could not start")

    # Once the store is allowed, the run that failed before its first checkpoint resumes from step 0.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    main(["train", "--resume", str(run), "--no-progress"])
    assert "finished: 200 env steps" in capsys.readouterr().out
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and len(info["resumes"]) == 1, info


def test_wandb_without_a_key_fails_the_run_in_one_line(tmp_path, capsys, monkeypatch):
    pytest.importorskip("wandb")
    for name in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    run = tmp_path / "run"
    code, errors = run_cli(["train", *FLAGS, "--track", "wandb", "--run-dir", str(run)], capsys)
    assert code == 1
    assert len(errors) == 1 and errors[0].startswith(
        "dmpo: error: --track wandb: the tracker could not start (PermissionError: no W&B API key"), errors
    status, reason = status_of(run)
    assert status == "failed" and reason.startswith("TrackerError: --track wandb")


@pytest.mark.parametrize("mode", [[], ["--actors", "1"]], ids=["local", "actors"])
def test_an_environment_factory_that_raises_is_one_line_and_no_run_folder(tmp_path, capsys, monkeypatch,
                                                                         mode):
    if mode:
        pytest.importorskip("ray")
    (tmp_path / "licensed_sim.py").write_text(
        "def make_env(seed):\n    raise RuntimeError('simulator licence not found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    code, errors = run_cli(["train", *FLAGS, "--env", "licensed_sim:make_env", *mode, "--run-dir", str(run)],
                           capsys)
    assert code == 2
    assert errors == ["dmpo: error: licensed_sim:make_env: the environment factory raised RuntimeError: "
                      "simulator licence not found"]
    assert not run.exists()


@pytest.mark.ray
def test_a_ray_address_that_refuses_fails_the_run_in_one_line(tmp_path, capsys):
    pytest.importorskip("ray")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    run = tmp_path / "run"
    code, errors = run_cli(["train", *FLAGS, "--actors", "1", "--ray-address", address,
                            "--run-dir", str(run)], capsys)
    assert code == 1
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"dmpo: error: cannot reach a Ray cluster at {address} ("), errors
    status, reason = status_of(run)
    assert status == "failed"
    assert reason.startswith(f"ClusterError: cannot reach a Ray cluster at {address}"), reason


def test_stop_timeout_needs_actors_and_a_positive_number(tmp_path, capsys):
    code, errors = run_cli(["train", *FLAGS, "--stop-timeout", "10", "--run-dir", str(tmp_path / "a")],
                           capsys)
    assert code == 2 and len(errors) == 1 and "--stop-timeout" in errors[0] and "--actors" in errors[0]
    code, errors = run_cli(["train", *FLAGS, "--actors", "1", "--stop-timeout", "0",
                            "--run-dir", str(tmp_path / "b")], capsys)
    assert code == 2 and errors == ["dmpo: error: --stop-timeout must be a number of seconds > 0, got 0.0"]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
