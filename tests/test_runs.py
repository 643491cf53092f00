"""Run directories: layout, config JSON round trip (nested frozen dataclasses), atomic writes, run ids."""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Literal

import pytest

import dmpo
from dmpo.config import ConfigError, DMPOConfig, LearnerConfig, MPOLossConfig, NetworkConfig
from dmpo.lifecycle.directory import (
    RunDirectory,
    config_from_dict,
    config_to_dict,
    default_run_id,
    load_config,
    new_run_path,
    save_config,
)


@dataclasses.dataclass(frozen=True)
class Inner:
    sizes: tuple[int, ...] = (1, 2)
    pair: tuple[str, float] = ("a", 1.0)
    mode: Literal["x", "y"] = "x"


@dataclasses.dataclass(frozen=True)
class Outer:
    """A stand-in for a top-level training config that nests the agent config."""

    seed: int = 0
    task: str = "cartpole:swingup"
    rate: float | None = None
    path: Path = Path("runs")
    tags: list[str] = dataclasses.field(default_factory=list)
    extra: dict[str, int] = dataclasses.field(default_factory=dict)
    inner: Inner = dataclasses.field(default_factory=Inner)
    agent: DMPOConfig = dataclasses.field(default_factory=DMPOConfig)


def _non_default_agent() -> DMPOConfig:
    return DMPOConfig(
        batch_size=32, samples_per_insert=None, n_step=3,
        learner=LearnerConfig(discount=0.95, target_update_rate=0.005, augmentation="image_shift",
                              mpo=MPOLossConfig(epsilon=0.2, per_dim_constraining=False)),
        networks=NetworkConfig(policy_layer_sizes=(64, 32), critic_layer_sizes=(8,), vmin=-10.0,
                               vmax=10.0, observation_network="drq"),
    )


# ------------------------------------------------------------------------------------------- config JSON


def test_dmpo_config_round_trip_through_json(tmp_path):
    config = _non_default_agent()
    save_config(tmp_path / "config.json", config)
    loaded = load_config(tmp_path / "config.json", DMPOConfig)
    assert loaded == config
    assert isinstance(loaded.networks.policy_layer_sizes, tuple)
    assert type(loaded.learner.mpo) is MPOLossConfig
    header = json.loads((tmp_path / "config.json").read_text())["type"]
    assert header == "dmpo.config.DMPOConfig"
    assert load_config(tmp_path / "config.json") == config  # class taken from the header


def test_nested_generic_fields_round_trip():
    config = Outer(seed=3, rate=0.5, path=Path("a/b"), tags=["t"], extra={"k": 2},
                   inner=Inner(sizes=(4,), pair=("b", 2.5), mode="y"), agent=_non_default_agent())
    data = json.loads(json.dumps(config_to_dict(config)))
    assert data["config"]["inner"] == {"sizes": [4], "pair": ["b", 2.5], "mode": "y"}
    assert config_from_dict(data, Outer) == config


def test_missing_fields_take_defaults_and_ints_become_floats():
    data = {"type": f"{__name__}.Outer", "config": {"agent": {"networks": {"vmin": -5}}}}
    loaded = config_from_dict(data, Outer)
    assert loaded.agent.networks.vmin == -5.0 and isinstance(loaded.agent.networks.vmin, float)
    assert loaded.agent.batch_size == DMPOConfig().batch_size


@pytest.mark.parametrize(("config", "match"), [
    ({"inner": {"mode": "z"}}, r"Outer.inner.mode must be one of \['x', 'y'\]"),
    ({"agent": {"batch_size": 1.5}}, r"Outer.agent.batch_size must be an int"),
    ({"agent": {"learner": {"clipping": 1}}}, r"Outer.agent.learner.clipping must be a bool"),
    ({"inner": {"pair": ["a"]}}, r"Outer.inner.pair must be a list of length 2"),
    ({"agent": {"lerner": {}}}, r"Outer.agent: unknown field\(s\) \['lerner'\]"),
    ({"rate": "fast"}, r"Outer.rate: 'fast' matches none of"),
    ({"agent": {"learner": {"discount": 2.0}}}, r"LearnerConfig.discount must be in \[0, 1\]"),
])
def test_bad_saved_values_name_the_field(config, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict({"type": f"{__name__}.Outer", "config": config}, Outer)


def test_type_header_must_match(tmp_path):
    save_config(tmp_path / "c.json", NetworkConfig())
    with pytest.raises(ConfigError, match="c.json: the saved config is a dmpo.config.NetworkConfig"):
        load_config(tmp_path / "c.json", DMPOConfig)
    with pytest.raises(ConfigError, match="cannot import"):
        config_from_dict({"type": "nowhere.Thing", "config": {}})
    with pytest.raises(TypeError, match="dataclass instance"):
        config_to_dict({"a": 1})


# ------------------------------------------------------------------------------------------- directories


def test_create_makes_layout_and_info(tmp_path):
    config = Outer(seed=7)
    run = RunDirectory.create(tmp_path / "r", config, seed=7, command=["dmpo", "train"])
    for name in ("logs", "tb", "checkpoints", "snapshots"):
        assert (run.path / name).is_dir()
    assert not (run.path / "videos").exists()  # made by the first video, not left empty in every run
    info = run.info()
    assert info["command"] == ["dmpo", "train"] and info["seed"] == 7 and info["status"] == "starting"
    assert info["dmpo_version"] == dmpo.__version__
    assert datetime.datetime.fromisoformat(info["start_time"]).tzinfo is not None
    assert run.load_config(Outer) == config


def test_create_refuses_non_empty_folder_and_other_configs(tmp_path):
    RunDirectory.create(tmp_path / "r", Outer(seed=1))
    with pytest.raises(FileExistsError, match="dmpo train --resume"):
        RunDirectory.create(tmp_path / "r", Outer(seed=1))
    RunDirectory.create(tmp_path / "r", Outer(seed=1), exist_ok=True)
    with pytest.raises(ConfigError, match="different config"):
        RunDirectory.create(tmp_path / "r", Outer(seed=2), exist_ok=True)
    (tmp_path / "empty").mkdir()
    RunDirectory.create(tmp_path / "empty", Outer())  # an empty folder (from new_run_path) is fine


def test_open_resume_and_status(tmp_path):
    RunDirectory.create(tmp_path / "r", Outer(), command=["first"])
    run = RunDirectory.open(tmp_path / "r")
    run.set_status("interrupted")
    assert run.info()["status"] == "interrupted" and "end_time" in run.info()
    run.mark_resumed(command=["second"])
    info = run.info()
    assert info["status"] == "starting" and info["command"] == ["first"]
    assert [r["command"] for r in info["resumes"]] == [["second"]]
    with pytest.raises(ValueError, match="status must be one of"):
        run.set_status("done")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match=r"missing \['config.json', 'run.json'\]"):
        RunDirectory.open(tmp_path)


def test_run_ids_are_timestamps_with_suffixes(tmp_path):
    now = datetime.datetime(2026, 3, 4, 5, 6, 7)
    assert default_run_id(now) == "20260304-050607"
    first = new_run_path(tmp_path, now=now)
    second = new_run_path(tmp_path, now=now)
    third = new_run_path(tmp_path, now=now)
    assert [p.name for p in (first, second, third)] == ["20260304-050607", "20260304-050607-1",
                                                        "20260304-050607-2"]
    assert all(p.is_dir() for p in (first, second, third))
    assert new_run_path(tmp_path, "mine") == tmp_path / "mine"
    with pytest.raises(ValueError, match="run_id"):
        new_run_path(tmp_path, "../escape")
