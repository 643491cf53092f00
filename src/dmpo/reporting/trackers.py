"""Experiment trackers: Weights & Biases and MLflow as one more sink of the logged rows.

`dmpo train --track wandb|mlflow --track-project NAME` sends every row the CSV and TensorBoard logs
get (`<label>/<key>`, each label on its own x axis: `actor_steps` for `environment_loop` and
`evaluator`, `learner_steps` for `learner`), the run's config, and evaluation videos when they are
made (`Tracker.log_video`). The tracker's run id is kept in run.json (`tracker`), so a resumed run
continues the same W&B or MLflow run (`wandb.init(id=..., resume="allow")`, `mlflow.start_run(run_id=...)`).

The packages are extras (`pip install 'dmpo-jax[wandb]'`, `pip install 'dmpo-jax[mlflow]'`; from a
checkout `pip install -e '.[wandb]'`; the latter the
`mlflow-skinny` client: it logs to a tracking server or to a file store, `MLFLOW_TRACKING_URI`).
Credentials stay where the libraries read them (WANDB_API_KEY, ~/.netrc, MLflow's variables); dmpo
never writes them anywhere, and `without_secrets()` keeps them out of the Ray processes' environment.

Single process: the trainer's loggers write to the tracker directly (`sink(label)`). Distributed:
the rows are written in the nodes' processes, so the driver follows their CSV logs (`CSVFollower`)
and forwards new rows each poll; credentials never leave the driver.
"""

from __future__ import annotations

import contextlib
import csv
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dmpo.config import ConfigError
from dmpo.utils.install import install_hint

_STEP_KEYS = {"environment_loop": "actor_steps", "evaluator": "actor_steps", "learner": "learner_steps"}
SECRET_VARIABLES = ("WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD",
                    "DATABRICKS_TOKEN")


class TrackerError(RuntimeError):
    """The tracker could not start (no W&B key, an MLflow store that refuses, ...): one line saying why."""


def check_installed(kind: str | None) -> None:
    """A one-line `ConfigError` naming the extra when `--track` names a package that is missing."""
    if kind is None:
        return
    module = {"wandb": "wandb", "mlflow": "mlflow"}[kind]
    try:
        __import__(module)
    except ImportError as error:
        raise ConfigError(f"--track {kind} needs the {module} package, which is not installed; install it "
                          f"with: {install_hint(kind)}") from error


def _number(value: Any) -> float | None:
    if isinstance(value, np.ndarray):
        if value.ndim != 0 or value.dtype.kind not in "biuf":
            return None
        value = value.item()
    if isinstance(value, bool | int | float | np.integer | np.floating | np.bool_):
        number = float(value)
        return number if np.isfinite(number) else None
    return None


class Tracker:
    """One tracker run; `sink(label)` is a logger (`write`/`close`) that forwards rows to it."""

    kind = ""

    def log_row(self, label: str, row: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def log_video(self, path: str | os.PathLike[str], label: str = "evaluator",
                  step: int | None = None) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def sink(self, label: str) -> TrackerSink:
        return TrackerSink(self, label)


class TrackerSink:
    """A logger sink of one label (see `dmpo.reporting.logging.make_logger`); closing it keeps the
    run open."""

    def __init__(self, tracker: Tracker, label: str) -> None:
        self._tracker, self._label = tracker, label

    def write(self, data: Mapping[str, Any]) -> None:
        self._tracker.log_row(self._label, data)

    def close(self) -> None:
        pass


class WandbTracker(Tracker):
    kind = "wandb"

    def __init__(self, run_dir: Path, project: str, config: dict[str, Any], run_id: str | None) -> None:
        import wandb

        if not _wandb_can_log():
            # Said here rather than left to wandb.init, whose answer depends on the settings an earlier
            # run in the same process left behind (an offline run makes every later one offline).
            raise PermissionError("no W&B API key: set WANDB_API_KEY, run `wandb login`, or log offline "
                                  "with WANDB_MODE=offline")
        self._wandb = wandb
        self.run = wandb.init(project=project, name=run_dir.name, dir=str(run_dir), config=config,
                              id=run_id, resume="allow" if run_id else None)
        self.run_id = self.run.id
        self._defined: set[str] = set()

    def log_row(self, label: str, row: Mapping[str, Any]) -> None:
        step_key = _STEP_KEYS.get(label)
        if label not in self._defined:  # each label on its own x axis, as in CSV and TensorBoard
            if step_key is not None:
                self.run.define_metric(f"{label}/{step_key}")
                self.run.define_metric(f"{label}/*", step_metric=f"{label}/{step_key}")
            self._defined.add(label)
        values = {f"{label}/{key}": number for key, value in row.items()
                  if (number := _number(value)) is not None}
        if values:
            self.run.log(values)

    def log_video(self, path: str | os.PathLike[str], label: str = "evaluator",
                  step: int | None = None) -> None:
        entry: dict[str, Any] = {f"{label}/video": self._wandb.Video(str(path))}
        if step is not None and label in _STEP_KEYS:
            entry[f"{label}/{_STEP_KEYS[label]}"] = step
        self.run.log(entry)

    def close(self) -> None:
        self.run.finish()


class MLflowTracker(Tracker):
    kind = "mlflow"

    def __init__(self, run_dir: Path, experiment: str, config: dict[str, Any], run_id: str | None) -> None:
        import mlflow

        self._mlflow = mlflow
        client = mlflow.tracking.MlflowClient()
        if run_id is None:
            found = client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else client.create_experiment(experiment)
            run = client.create_run(experiment_id, run_name=run_dir.name)
            run_id = run.info.run_id
            flat = _flatten(config)
            client.log_batch(run_id, params=[mlflow.entities.Param(key, str(value)[:6000])
                                             for key, value in flat.items()])
        else:
            client.update_run(run_id, status="RUNNING")
        self._client = client
        self.run_id = run_id

    def log_row(self, label: str, row: Mapping[str, Any]) -> None:
        step_key = _STEP_KEYS.get(label)
        step = int(_number(row.get(step_key)) or 0) if step_key else 0
        metrics = [self._mlflow.entities.Metric(f"{label}/{key}", number, 0, step)
                   for key, value in row.items() if (number := _number(value)) is not None]
        if metrics:
            self._client.log_batch(self.run_id, metrics=metrics)

    def log_video(self, path: str | os.PathLike[str], label: str = "evaluator",
                  step: int | None = None) -> None:
        self._client.log_artifact(self.run_id, str(path), artifact_path=f"videos/{label}")

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _wandb_can_log() -> bool:
    """An offline or disabled W&B, or a key: in WANDB_API_KEY or in the netrc file `wandb login` writes."""
    import netrc
    from urllib.parse import urlparse

    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return True
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):  # no netrc file, or one wandb could not read either
        return False


def open_tracker(config: Any, run: Any) -> Tracker | None:
    """The tracker `config.track` names for `run` (a `RunDirectory`), continuing the run id kept in
    run.json when there is one (a resumed run); None without `track`."""
    if config.track is None:
        return None
    check_installed(config.track)
    from dmpo.config.files import config_to_dict

    saved = run.info().get("tracker") or {}
    run_id = saved.get("id") if saved.get("kind") == config.track else None
    settings = config_to_dict(config)["config"]
    cls = WandbTracker if config.track == "wandb" else MLflowTracker
    try:
        tracker = cls(run.path, config.track_project, settings, run_id)
    except Exception as error:  # noqa: BLE001 - whatever the library raises, the run cannot start
        lines = str(error).strip().splitlines() or [""]
        raise TrackerError(f"--track {config.track}: the tracker could not start "
                           f"({type(error).__name__}: {lines[0]})") from error
    if tracker.run_id != run_id:
        run.update_info(tracker={"kind": config.track, "id": tracker.run_id, "project": config.track_project})
    return tracker


@contextlib.contextmanager
def without_secrets() -> Iterator[None]:
    """Removes tracker credentials from this process's environment for the block (e.g. while Ray
    starts its processes, which inherit it) and puts them back after."""
    saved = {name: os.environ.pop(name) for name in SECRET_VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


class CSVFollower:
    """Reads the rows appended to a run's CSV logs since the last call (complete lines only)."""

    def __init__(self, run_dir: str | os.PathLike[str], labels: tuple[str, ...] = tuple(_STEP_KEYS)) -> None:
        self._paths = {label: Path(run_dir) / "logs" / label / "logs.csv" for label in labels}
        self._offsets = {label: self._size(path) for label, path in self._paths.items()}
        self._headers: dict[str, list[str]] = {}

    @staticmethod
    def _size(path: Path) -> int:
        return path.stat().st_size if path.is_file() else 0

    def new_rows(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for label, path in self._paths.items():
            if not path.is_file():
                continue
            with open(path, "rb") as file:
                if label not in self._headers:
                    header = file.readline()
                    if not header.endswith(b"\n"):
                        continue
                    self._headers[label] = next(csv.reader([header.decode("utf-8")]))
                    self._offsets[label] = max(self._offsets[label], len(header))
                file.seek(self._offsets[label])
                chunk = file.read()
            complete = chunk[:chunk.rfind(b"\n") + 1]
            self._offsets[label] += len(complete)
            for cells in csv.reader(complete.decode("utf-8").splitlines()):
                row = {}
                for key, cell in zip(self._headers[label], cells, strict=False):
                    try:
                        row[key] = float(cell)
                    except ValueError:
                        continue
                yield label, row


__all__ = ["CSVFollower", "MLflowTracker", "Tracker", "WandbTracker", "check_installed", "open_tracker",
           "without_secrets"]
