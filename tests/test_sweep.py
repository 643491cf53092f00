"""`dmpo sweep`: flags, the results table, and sweeps on a private local Ray cluster (tiny networks)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dmpo.cli.main import main
from dmpo.config import TrainConfig
from dmpo.lifecycle.directory import RunDirectory
from dmpo.reporting.logging import CSVLogger
from dmpo.sweeps.results import find_trials, read_trial, write_results
from dmpo.sweeps.spec import SweepSpec, SweepSpecError, check_train_flags, parse_grid, parse_space
from waiting import wait_for

TINY = ["--agent.networks.policy-layer-sizes", "8", "--agent.networks.critic-layer-sizes", "8",
        "--agent.networks.num-atoms", "5", "--agent.batch-size", "16", "--agent.min-replay-size", "100",
        "--agent.max-replay-size", "2000", "--agent.samples-per-insert", "16"]
# cartpole with action repeat 8: 125 agent steps per episode, an evaluation of one episode.
SMALL = ["--action-repeat", "8", "--eval-episodes", "1", "--eval-every", "125", *TINY]


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out + captured.err


# ------------------------------------------------------------------------------------------- flags


@pytest.mark.parametrize("argv, message", [
    (["--grid", "agent.nope=1,2"], "--grid 'agent.nope=1,2': `dmpo train` has no flag --agent.nope"),
    (["--grid", "agent.learner.num-samples"], "--grid 'agent.learner.num-samples': expected KEY=V1,V2"),
    (["--grid", "agent.learner.num-samples=2,2"], "values must be distinct and non-empty"),
    (["--grid", "seed=1,2"], "the sweep sets --seed itself; use --seeds"),
    (["--grid", "agent.learner.num-samples=2,x"],
     "--grid agent.learner.num-samples=x: `dmpo train` refuses these flags: Error parsing "
     "--agent.learner.num-samples"),
    (["--grid", "agent.batch-size=16,0"], "--grid agent.batch-size=0: --agent.batch-size must be a positive"),
    (["--seeds", "1", "1"], "--seeds must be distinct integers >= 0, got [1, 1]"),
    (["--space", "agent.learner.policy-learning-rate=1e-4:1e-3"], "--space needs --search optuna"),
    (["--search", "optuna", "--trials", "2"], "--search optuna needs at least one --space"),
    (["--search", "optuna", "--space", "agent.learner.policy-learning-rate=1e-4:1e-3"],
     "--trials must be a positive integer with --search optuna, got 0"),
    (["--search", "optuna", "--trials", "2", "--space", "agent.learner.policy-learning-rate=0:1e-3:log"],
     "a log range needs LOW > 0"),
    (["--search", "optuna", "--trials", "2", "--space", "agent.learner.policy-learning-rate=1e-3:1e-4"],
     "LOW must be below HIGH"),
    (["--search", "optuna", "--trials", "2", "--space", "agent.learner.policy-learning-rate=a:b"],
     "'a' is not a number"),
    (["--", "--run-dir", "x"], "the flags after `--` may not set ['--run-dir']"),
    (["--", "--eval-every", "0"], "--eval-every 0: a sweep reads each trial's evaluations"),
    (["--cpus-per-trial", "0"], "--cpus-per-trial must be a positive number, got 0.0"),
    (["--resources-per-trial", "{worker: 1}"], "--resources-per-trial must be a JSON object"),
    (["--resources-per-trial", '{"CPU": 1}'], "--resources-per-trial must map custom Ray resource names"),
])
def test_bad_flags_are_one_line_naming_the_flag_before_anything_starts(argv, message, capsys, tmp_path):
    code, output = run_cli(["sweep", str(tmp_path / "out"), *argv], capsys)
    assert code == 2
    assert message in output, output
    assert len(output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_grid_points_are_the_product_of_the_grids():
    grid = parse_grid(["agent.learner.num-samples=2,3", "agent.networks.critic-layer-sizes=8 8,16"])
    spec = SweepSpec(out=Path("o"), seeds=(0,), grid=grid, train_flags=("--steps", "5"))
    points = spec.points()
    assert [p.name for p in points] == [
        "agent.learner.num-samples=2,agent.networks.critic-layer-sizes=8_8",
        "agent.learner.num-samples=2,agent.networks.critic-layer-sizes=16",
        "agent.learner.num-samples=3,agent.networks.critic-layer-sizes=8_8",
        "agent.learner.num-samples=3,agent.networks.critic-layer-sizes=16"]
    assert spec.trial_flags(points[0].flags(), 4) == [
        "--steps", "5", "--agent.learner.num-samples", "2", "--agent.networks.critic-layer-sizes", "8", "8",
        "--seed", "4"]
    config = check_train_flags(spec.trial_flags(points[0].flags(), 4), "x")
    assert config.agent.networks.critic_layer_sizes == (8, 8) and config.seed == 4


def test_space_ranges():
    integer, logarithmic = parse_space(["agent.batch-size=16:64", "agent.learner.mpo.epsilon=0.01:0.5:log"])
    assert (integer.integer, integer.log, integer.low, integer.high) == (True, False, 16, 64)
    assert (logarithmic.integer, logarithmic.log) == (False, True)
    with pytest.raises(SweepSpecError, match="already in another --space"):
        parse_space(["agent.batch-size=16:64", "agent.batch-size=1:2"])


# ------------------------------------------------------------------------------------------- results


def make_trial(out: Path, point: str, seed: int, returns, *, status="finished", every=100, wall=30.0,
               env="dmc:cartpole-swingup") -> Path:
    path = out / point / f"seed-{seed}"
    run = RunDirectory.create(path, TrainConfig(env=env, seed=seed, steps=every * len(returns)), seed=seed)
    logger = CSVLogger(run.path, "evaluator")
    for i, value in enumerate(returns):
        logger.write({"actor_steps": every * (i + 1), "return_mean": value, "wall_seconds": wall * (i + 1)})
    logger.close()
    run.set_status(status)
    return path


def test_results_table_per_trial_and_per_grid_point(tmp_path):
    out = tmp_path / "sweep"
    for seed, returns in enumerate([(100.0, 900.0, 850.0), (100.0, 200.0, 300.0), (50.0, 820.0, 700.0)]):
        make_trial(out, "a=1", seed, returns)
    make_trial(out, "a=2", 0, (10.0, 20.0), status="interrupted")
    (out / "a=1" / "seed-3.incomplete-1").mkdir()  # set aside: not a trial
    trials = [read_trial(run, {"dmc:cartpole-swingup": 800.0}) for run in find_trials(out)]
    assert [(t.point, t.seed) for t in trials] == [("a=1", 0), ("a=1", 1), ("a=1", 2), ("a=2", 0)]
    first = trials[0]
    assert (first.final_return, first.best_return, first.env_steps) == (850.0, 900.0, 300)
    assert (first.threshold_steps, first.threshold_minutes, first.wall_minutes) == (200, 1.0, 1.5)
    assert trials[1].threshold_steps is None  # never reached 800
    assert trials[2].threshold_steps == 200
    points = write_results(out, trials, resamples=200)
    # Three seeds: the IQM of three values trims none (their mean, 616.7), with an interval inside them.
    assert points[0].point == "a=1" and points[0].finished == 3
    assert points[0].iqm.startswith("616.7 [")
    low, high = (float(x) for x in points[0].iqm.split("[")[1].rstrip("]").split(","))
    assert 300.0 <= low <= 616.7 <= high <= 850.0
    assert points[1].iqm == "n/a (no finished seed)" and points[1].seeds == 1
    rows = (out / "results.csv").read_text().splitlines()
    assert rows[0].startswith("point,seed,status,env_steps,final_return,best_return,threshold,threshold_")
    assert rows[1].startswith("a=1,0,finished,300,850.0,900.0,800,200,1.00,1.50,")
    assert rows[4].startswith("a=2,0,interrupted,200,20.0,20.0,800,,,1.00,")
    assert (out / "points.csv").read_text().count("\n") == 3
    markdown = (out / "results.md").read_text()
    assert "| a=1 | 3 | 3 | 616.7 [" in markdown and "| a=1 | 0 | finished | 300 | 850.0 |" in markdown


def test_a_folder_holding_another_sweep_is_refused(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"commands": [], "defining": {
        "train_flags": ["--steps", "500"], "search": "grid"}}))
    code, output = run_cli(["sweep", str(out), "--", "--steps", "250", *SMALL], capsys)
    assert code == 2
    assert "holds a sweep made with other settings (train_flags: saved ['--steps', '500']" in output
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    code, output = run_cli(["sweep", str(tmp_path / "other"), "--", "--steps", "250", *SMALL], capsys)
    assert code == 2 and "is not a sweep folder" in output


def test_a_stopped_trials_env_steps_are_those_its_newest_checkpoint_holds(tmp_path):
    # Pruned (or stopped) after its evaluation at 200 env steps, the trial wrote a checkpoint at 260.
    run = make_trial(tmp_path / "sweep", "a=1", 0, (10.0, 20.0), status="interrupted")
    for name in ("step_000000000100", "step_000000000260", "step_000000000260-1"):
        (run / "checkpoints" / name).mkdir(parents=True)
    (run / "checkpoints" / ".step_000000000900.tmp").mkdir()  # being written: not held yet
    trial = read_trial(run, {}, pruned=[str(run)])
    assert (trial.status, trial.env_steps, trial.final_return) == ("pruned", 260, 20.0)


def test_a_sweep_into_a_folder_another_sweep_holds_is_refused(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    hold = f"from dmpo.lifecycle.lock import acquire; acquire({str(out)!r}); print(1, flush=True); "
    holder = subprocess.Popen(  # another sweep, holding the folder's lock as a running sweep does
        [sys.executable, "-c", hold + "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "1\n"
        code, output = run_cli(["sweep", str(out), "--", "--steps", "250", *SMALL], capsys)  # it is starting
        # ... and once it has recorded its settings (the same as this command's: it would be continued).
        (out / "sweep.json").write_text(json.dumps({"commands": [], "defining": {
            "train_flags": ["--steps", "250", *SMALL], "search": "grid"}}))
        code_running, output_running = run_cli(["sweep", str(out), "--", "--steps", "250", *SMALL], capsys)
    finally:
        holder.communicate("", timeout=60)
    refusal = (f"dmpo sweep: error: sweep folder {out} is in use by process {holder.pid} "
               f"(lock {out / '.lock'}); wait for it to end or stop it first")
    assert code == 1 and output.strip().splitlines()[-1] == refusal, output
    assert code_running == 1 and output_running.strip().splitlines()[-1] == refusal, output_running
    assert not list(tmp_path.glob("out/*/seed-*"))


def test_a_ray_address_nothing_answers_is_one_line_and_leaves_no_sweep_folder(capsys, tmp_path):
    pytest.importorskip("ray.tune")
    out = tmp_path / "out"
    argv = ["sweep", str(out), "--ray-address", "127.0.0.1:1", "--", "--steps", "250", *SMALL]
    code, output = run_cli(argv, capsys)
    assert code == 1, output
    assert "Traceback" not in output, output
    assert output.strip().splitlines() == [
        "1 trials in " + str(out) + ": 1 start",
        "dmpo sweep: error: cannot reach a Ray cluster at 127.0.0.1:1 (Connection refused)"], output
    assert not out.exists()


def test_a_points_flags_of_the_previous_dmpo_read_and_a_newer_ones_are_refused(tmp_path):
    from dmpo.sweeps.results import _point_flags

    run = tmp_path / "a=1" / "seed-0"
    run.mkdir(parents=True)
    (run.parent / "flags.json").write_text('{"flags": ["--a", "1"]}')  # no header
    assert _point_flags(run) == ("--a", "1")
    (run.parent / "flags.json").write_text('{"format": "dmpo.sweep-point", "format_version": 2, "flags": []}')
    with pytest.raises(ValueError, match="flags.json has format version 2, .*sweep-point format version 1"):
        _point_flags(run)


# ------------------------------------------------------------------------------------- on a Ray cluster


def sweep_command(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "dmpo.cli", "sweep", str(out), "--num-cpus", "2", *args]


def fingerprint(out: Path) -> dict[str, tuple[int, str]]:
    """Every file of every trial folder: its modification time and content hash."""
    found = {}
    for run in find_trials(out):
        for path in sorted(run.rglob("*")):
            if path.is_file():
                found[str(path)] = (path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return found


@pytest.mark.ray
def test_an_interrupted_grid_sweep_resumes_its_trials_and_running_it_again_changes_nothing(tmp_path, capsys):
    """One sweep for the whole life: stopped by SIGTERM, it resumes its trials from their checkpoints
    when the same command runs again; finished, the command only reads it; its trials are ordinary run
    directories."""
    out = tmp_path / "sweep"
    command = sweep_command(out, "--seeds", "0", "--grid", "agent.learner.num-samples=2,3", "--",
                            "--steps", "1500", "--checkpoint-every", "125", *SMALL)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Each trial's own checkpoint: two of one trial would let the other finish or not start.
        wait_for(lambda: len({path.parents[2] for path in out.glob("*/seed-*/checkpoints/step_*/state.json")})
                 >= 2, "a checkpoint of both trials", timeout=600, period=1.0)
        process.send_signal(signal.SIGTERM)  # as a cluster scheduler stops a job
        output, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, output[-3000:]
    assert "the same command continues the sweep" in output
    assert "Tuner.restore" not in output, output[-3000:]  # Tune's own way would not resume the trials
    runs = find_trials(out)
    assert [(r.parent.name, r.name) for r in runs] == [
        (f"agent.learner.num-samples={n}", "seed-0") for n in (2, 3)]
    stopped = [json.loads((run / "run.json").read_text())["status"] for run in runs]
    assert stopped == ["interrupted", "interrupted"], output[-3000:]

    resumed = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "2 trials: 2 finished, 0 pruned, 0 failed" in resumed.stdout, resumed.stdout[-3000:]
    for run in runs:
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "finished" and len(info["resumes"]) == 1
        assert f"--resume {run}" in shlex.join(info["resumes"][0]["command"])
        saved = RunDirectory.open(run).load_config(TrainConfig)
        assert saved.agent.learner.num_samples == int(run.parent.name[-1])
        assert saved.seed == 0 and saved.steps == 1500
    # A trial stopped mid-episode resumes with a new episode: it ends at the first episode end past 1500.
    with open(out / "results.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [(row["point"], row["status"]) for row in table] == [
        (f"agent.learner.num-samples={n}", "finished") for n in (2, 3)], table
    assert all(1500 <= int(row["env_steps"]) < 1500 + 125 for row in table), table

    before = fingerprint(out)
    again = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 trials in" in again.stdout and "2 finished" in again.stdout, again.stdout[-3000:]
    assert fingerprint(out) == before  # finished trials are only read
    capsys.readouterr()
    main(["eval", str(runs[0]), "--episodes", "1"])  # a trial is an ordinary run directory
    assert "dmc:cartpole-swingup: return " in capsys.readouterr().out
    assert main(["plot", str(out), "-o", str(tmp_path / "curves.png")]) is None
    assert (tmp_path / "curves.png").stat().st_size > 0


@pytest.mark.ray
def test_an_optuna_search_prunes_trials_and_prints_the_best_flags(tmp_path):
    out = tmp_path / "search"
    # One trial at a time: the searcher's seed fixes the settings, so the same trials are pruned each time.
    command = sweep_command(out, "--search", "optuna", "--trials", "4", "--max-concurrent", "1",
                            "--space", "agent.learner.policy-learning-rate=1e-5:1e-2:log",
                            "--space", "agent.learner.num-samples=2:4", "--", "--steps", "500", *SMALL)
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    pruned = (out / "pruned.txt").read_text().split()
    assert pruned, result.stdout[-3000:]
    assert "4 trials: " in result.stdout and f"{len(set(pruned))} pruned" in result.stdout
    [best] = [line for line in result.stdout.splitlines() if line.startswith("best: dmpo train ")]
    flags = shlex.split(best.removeprefix("best: dmpo train "))
    config = check_train_flags(flags, "best")  # `dmpo train` takes them as they are
    assert 1e-5 <= config.agent.learner.policy_learning_rate <= 1e-2
    assert 2 <= config.agent.learner.num_samples <= 4 and config.steps == 500
    finished = [read_trial(run) for run in find_trials(out)]
    best_final = max(t.final_return for t in finished if t.status == "finished")
    [best_trial] = [t for t in finished if t.final_return == best_final and t.status == "finished"]
    assert RunDirectory.open(best_trial.run).load_config(TrainConfig).agent.learner == config.agent.learner
    assert os.path.isfile(out / "results.md")
    before = fingerprint(out)
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]  # Tune restores the search: nothing runs again
    assert best in again.stdout.splitlines() and fingerprint(out) == before


@pytest.mark.ray
def test_a_trial_whose_node_is_lost_is_restarted_and_resumes(tmp_path):
    """Two Ray nodes on 127.0.0.1 (tests/two_node_cluster.py); the trial may run only on the worker node."""
    from test_multinode import DEADLINE, Lines

    token_env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                 "PYTHONUNBUFFERED": "1", "RAY_kill_child_processes_on_worker_exit": "false"}
    token_env.pop("RAY_AUTH_TOKEN_PATH", None)
    driver_env = {**token_env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # as in test_multinode
    ray_dir = tempfile.mkdtemp(prefix="dmpo-sw-", dir="/tmp")
    script = str(Path(__file__).with_name("two_node_cluster.py"))
    holder = subprocess.Popen([sys.executable, script, ray_dir], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=token_env)
    output = Lines(holder)
    sweep = None
    out = tmp_path / "sweep"
    try:
        address = output.expect("ADDRESS ")
        command = [sys.executable, "-m", "dmpo.cli", "sweep", str(out), "--ray-address", address,
                   "--resources-per-trial", '{"worker": 1}', "--max-failures", "3", "--",
                   "--steps", "1500", "--checkpoint-every", "125", *SMALL]
        sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=driver_env)
        sweep_output = Lines(sweep)
        run = out / "default" / "seed-0"
        wait_for(lambda: list(run.glob("checkpoints/step_*/state.json")), "the trial's first checkpoint",
                 DEADLINE, 0.5)
        holder.stdin.write("kill-worker\n")
        holder.stdin.flush()
        # The trial ran on the lost node. Ray titles its process after the method it is running
        # ("ray::ResourceTrainable.train", "ray::Trainable.save": Tune's classes) and after the actor's
        # class between calls ("ray::SweepTrial"); the kill can land at either moment.
        killed = output.expect("KILLED ").split()
        assert any("SweepTrial" in name or "Trainable." in name for name in killed), killed
        holder.stdin.write("add-worker\n")
        holder.stdin.flush()
        output.expect("ADDED")
        assert sweep.wait(timeout=2 * DEADLINE) == 0, "".join(sweep_output.seen)[-4000:]
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "finished" and len(info["resumes"]) >= 1, info
        log = (out / ".logs" / "default__seed-0.log").read_text()
        assert "=== resume:" in log
    finally:
        if sweep is not None and sweep.poll() is None:
            sweep.kill()
            sweep.wait(timeout=60)
        from two_node_cluster import stop_holder

        stop_holder(holder)


@pytest.mark.ray
def test_a_trial_may_itself_be_distributed_on_the_sweeps_cluster(tmp_path):
    out = tmp_path / "sweep"
    every_250 = [*SMALL[:5], "250", *SMALL[6:]]  # SMALL, evaluating every 250 steps
    command = [sys.executable, "-m", "dmpo.cli", "sweep", str(out), "--num-cpus", "8", "--", "--actors", "1",
               "--steps", "500", *every_250]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    run = out / "default" / "seed-0"
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert RunDirectory.open(run).load_config(TrainConfig).actors == 1
    started = (out / ".logs" / "default__seed-0.log").read_text().splitlines()[0]
    assert "--actors 1" in started and "--ray-address 127.0.0.1:" in started  # on the sweep's own cluster
