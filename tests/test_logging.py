"""Loggers: terminal format, CSV header/append/resume rules, TensorBoard events, time filter, factory."""

from __future__ import annotations

import csv
import io
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from tensorboardX.proto import event_pb2

from dmpo.reporting.logging import (
    CSVLogger,
    Dispatcher,
    NoOpLogger,
    TensorBoardLogger,
    TerminalLogger,
    TimeFilter,
    format_row,
    make_logger,
)
from dmpo.reporting.progress import Progress


class ListLogger:
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.closed = False

    def write(self, data):
        self.rows.append(dict(data))

    def close(self):
        self.closed = True


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def read_tb_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Parses TFRecord framing (u64 length, u32 crc, payload, u32 crc) and the Event protos."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    files = sorted(logdir.glob("events.out.tfevents.*"))
    assert files, f"no event file in {logdir}"
    for path in files:
        raw = path.read_bytes()
        offset = 0
        while offset < len(raw):
            (length,) = struct.unpack_from("<Q", raw, offset)
            payload = raw[offset + 12: offset + 12 + length]
            offset += 12 + length + 4
            event = event_pb2.Event.FromString(payload)
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


# ----------------------------------------------------------------------------------------------- terminal


def test_format_row_sorts_titles_and_rounds():
    line = format_row("environment_loop", {
        "steps_per_second": 123.45678, "episode_return": np.float32(1.5), "actor_steps": 7,
        "flag": True, "name": "walker", "missing": None, "zero_d": np.array(2.0),
    })
    assert line == ("[Environment Loop] Actor Steps = 7 | Episode Return = 1.500 | Flag = True | "
                    "Name = walker | Steps Per Second = 123.457 | Zero D = 2.000")


def test_terminal_logger_uses_print_fn_and_skips_empty_rows():
    lines: list[str] = []
    logger = TerminalLogger("learner", print_fn=lines.append)
    logger.write({"loss": 0.25, "steps": np.int64(3)})
    logger.write({"ignored": None})
    assert lines == ["[Learner] Loss = 0.250 | Steps = 3"]


def test_terminal_logger_default_prints_to_stdout(capsys):
    TerminalLogger("actor").write({"a_b": 1.0})
    assert capsys.readouterr().out.strip() == "[Actor] A B = 1.000"


# ----------------------------------------------------------------------------------------------------- csv


def test_csv_columns_fixed_by_first_row(tmp_path):
    logger = CSVLogger(tmp_path, "learner")
    logger.write({"b": 1, "a": 2.5, "none": None})
    with pytest.warns(UserWarning, match="'c'"):
        logger.write({"a": 3, "c": 4})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning is given once only
        logger.write({"b": 5, "c": 6, "d": 7})
    logger.close()
    columns, rows = read_csv(tmp_path / "logs" / "learner" / "logs.csv")
    assert columns == ["b", "a"]
    assert rows == [{"b": "1", "a": "2.5"}, {"b": "", "a": "3"}, {"b": "5", "a": ""}]


def test_csv_rows_are_on_disk_before_close(tmp_path):
    logger = CSVLogger(tmp_path, "actor")
    logger.write({"x": np.float64(0.5)})
    _, rows = read_csv(logger.path)  # no close(): a killed process keeps what was written
    assert rows == [{"x": "0.5"}]
    logger.close()


def test_csv_resume_appends_under_one_header(tmp_path):
    first = CSVLogger(tmp_path, "evaluator")
    first.write({"steps": 1, "episode_return": 10.0})
    first.close()
    second = CSVLogger(tmp_path, "evaluator")
    assert second.columns == ["steps", "episode_return"]
    with pytest.warns(UserWarning, match="new_key"):
        second.write({"episode_return": 20.0, "steps": 2, "new_key": 1})
    second.close()
    text = (tmp_path / "logs" / "evaluator" / "logs.csv").read_text()
    assert text.count("steps,episode_return") == 1
    columns, rows = read_csv(tmp_path / "logs" / "evaluator" / "logs.csv")
    assert columns == ["steps", "episode_return"]
    assert [r["steps"] for r in rows] == ["1", "2"]
    assert [r["episode_return"] for r in rows] == ["10.0", "20.0"]


def test_csv_reopen_cuts_a_torn_last_row(tmp_path):
    path = tmp_path / "logs" / "x" / "logs.csv"
    path.parent.mkdir(parents=True)
    path.write_text("a,b\n1,2\n3,")  # killed in the middle of a row
    logger = CSVLogger(tmp_path, "x")
    logger.write({"a": 5, "b": 6})
    logger.close()
    assert path.read_text() == "a,b\n1,2\n5,6\n"


def test_csv_empty_rows_do_not_fix_columns(tmp_path):
    logger = CSVLogger(tmp_path, "x")
    logger.write({"a": None})
    logger.write({"b": 1})
    logger.close()
    assert read_csv(logger.path) == (["b"], [{"b": "1"}])


# --------------------------------------------------------------------------------------------- tensorboard


def test_tensorboard_scalars_read_back_with_step_key(tmp_path):
    logger = TensorBoardLogger(tmp_path, "learner", step_key="learner_steps")
    logger.write({"learner_steps": 10, "loss": 0.5, "text": "skip", "vec": np.ones(3), "none": None})
    logger.write({"learner_steps": np.int64(20), "loss": np.float32(0.25)})
    logger.close()
    scalars = read_tb_scalars(tmp_path / "tb" / "learner")
    assert scalars["loss"] == [(10, 0.5), (20, 0.25)]
    assert scalars["learner_steps"] == [(10, 10.0), (20, 20.0)]
    assert "text" not in scalars and "vec" not in scalars and "none" not in scalars


def test_tensorboard_uses_write_counter_without_step_key(tmp_path):
    logger = TensorBoardLogger(tmp_path, "actor")
    for value in (1.0, 2.0, 3.0):
        logger.write({"r": value, "flag": value > 1.5})
    logger.close()
    scalars = read_tb_scalars(tmp_path / "tb" / "actor")
    assert scalars["r"] == [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert scalars["flag"] == [(0, 0.0), (1, 1.0), (2, 1.0)]


# -------------------------------------------------------------------------------------- filter and fan-out


def test_time_filter_drops_rows_within_delta_of_last_written():
    sink, clock = ListLogger(), FakeClock()
    logger = TimeFilter(sink, time_delta=1.0, clock=clock)
    for t, i in [(0.0, 0), (0.5, 1), (0.99, 2), (1.0, 3), (1.5, 4), (1.9, 5), (2.0, 6)]:
        clock.now = t
        logger.write({"i": i})
    # 1.5 and 1.9 are within 1 s of the write at 1.0; 2.0 is exactly 1 s later.
    assert [row["i"] for row in sink.rows] == [0, 3, 6]
    logger.close()
    assert sink.closed


def test_time_filter_zero_passes_everything_and_rejects_negative():
    sink = ListLogger()
    logger = TimeFilter(sink, 0.0, clock=FakeClock())
    for i in range(3):
        logger.write({"i": i})
    assert len(sink.rows) == 3
    with pytest.raises(ValueError, match="time_delta"):
        TimeFilter(sink, -1.0)


def test_dispatcher_writes_and_closes_all():
    a, b = ListLogger(), ListLogger()
    logger = Dispatcher([a, b])
    logger.write({"x": 1})
    logger.close()
    assert a.rows == b.rows == [{"x": 1}]
    assert a.closed and b.closed


def test_noop_logger():
    logger = NoOpLogger()
    logger.write({"x": 1})
    logger.close()


def test_make_logger_writes_all_sinks(tmp_path):
    lines: list[str] = []
    logger = make_logger("learner", tmp_path, time_delta=0.0, step_key="learner_steps", print_fn=lines.append)
    logger.write({"learner_steps": 1, "loss": 2.0})
    logger.write({"learner_steps": 2, "loss": 1.0})
    logger.close()
    assert lines == ["[Learner] Learner Steps = 1 | Loss = 2.000",
                     "[Learner] Learner Steps = 2 | Loss = 1.000"]
    assert read_csv(tmp_path / "logs" / "learner" / "logs.csv")[0] == ["learner_steps", "loss"]
    assert read_tb_scalars(tmp_path / "tb" / "learner")["loss"] == [(1, 2.0), (2, 1.0)]


def test_make_logger_time_filter_applies_to_all_sinks(tmp_path):
    lines: list[str] = []
    logger = make_logger("actor", tmp_path, time_delta=3600.0, tensorboard=False, print_fn=lines.append)
    logger.write({"i": 0})
    logger.write({"i": 1})
    logger.close()
    assert len(lines) == 1
    assert read_csv(tmp_path / "logs" / "actor" / "logs.csv")[1] == [{"i": "0"}]


def test_make_logger_without_run_dir_touches_no_disk(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert isinstance(make_logger("x", None, terminal=False), NoOpLogger)
    lines: list[str] = []
    make_logger("x", None, print_fn=lines.append).write({"a": 1})
    assert lines == ["[X] A = 1"]
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ progress


def test_progress_tracks_statistics_when_not_drawing():
    clock = FakeClock()
    progress = Progress(1000, enabled=False, clock=clock)
    with progress:
        for i in range(12):
            clock.now = float(i)
            progress.update(env_steps=100 * (i + 1), episodes=i + 1, last_return=float(i),
                            learner_steps=5 * i)
    stats = progress.summary()
    assert not progress.active
    assert stats["env_steps"] == 1200 and stats["episodes"] == 12 and stats["last_return"] == 11.0
    assert stats["mean_return"] == pytest.approx(np.mean(np.arange(2, 12)))  # the last 10 returns
    assert stats["learner_steps_per_second"] == pytest.approx(5.0)


def test_progress_is_disabled_off_a_terminal_and_draws_when_forced():
    assert not Progress(10).active  # pytest captures stdout: not a TTY
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=160)
    with Progress(10, force=True, console=console) as progress:
        assert progress.active
        progress.update(env_steps=5, episodes=2, last_return=3.25, learner_steps=1)
    text = buffer.getvalue()
    assert "5/10" in text and "episodes 2" in text and "return 3.2" in text


def test_status_line_keeps_steps_and_eta_and_drops_fields_from_the_right():
    clock = FakeClock()
    lines: list[str] = []
    progress = Progress(100_000, live=False, clock=clock, print_fn=lines.append)
    clock.now = 0.0
    progress.update(env_steps=10_000, episodes=10, learner_steps=0)  # filling replay: no ETA yet
    clock.now = 5.0
    progress.update(env_steps=15_000, episodes=15, learner_steps=1)  # learning starts: the ETA's clock
    clock.now = 10.0
    progress.update(env_steps=20_000, episodes=20, last_return=-12.25, learner_steps=500)
    progress.evaluation(20_000, [810.0, 814.6])
    wide = progress.status_line(200)
    # 5,000 steps in the 5 s since learning started: 80,000 to go take 80 s.
    assert wide == ("train 20,000/100,000 steps 20% ETA 0:01:20 | return -12.2 (mean1 -12.2) | eval 812.3 "
                    "| 50.0 upd/s | episodes 20")
    # The return does not fit in 60 columns: it and every field after it go.
    assert progress.status_line(60) == "train 20,000/100,000 steps 20% ETA 0:01:20"
    assert progress.status_line(40) == "20,000/100,000 steps 20% ETA 0:01:20"  # never the steps or ETA
    assert progress.status_line(30) == "20k/100k steps 20% ETA 0:01:20"  # abbreviated rather than cut
    # Off a terminal: a status line per tenth of the budget and the evaluation as one short line.
    assert lines == ["train 10,000/100,000 steps 10% | episodes 10",
                     progress.status_line(120).replace(" | eval 812.3", ""),
                     "eval @ 20,000: 812.3 ± 2.3 over 2 episodes"]


def test_progress_rejects_bad_total():
    with pytest.raises(ValueError, match="total_steps"):
        Progress(0)


# -- rewinding logs to a resumed checkpoint's step ------------------------------------------------


def test_rewind_csv_drops_rows_past_the_step_and_a_torn_line(tmp_path):
    from dmpo.reporting.logging import CSVLogger
    from dmpo.reporting.rewind import rewind_csv

    logger = CSVLogger(tmp_path, "loop")
    for step in (100, 200, 300, 400):
        logger.write({"actor_steps": step, "episode_return": step / 10})
    logger.close()
    with open(logger.path, "a", encoding="utf-8") as f:
        f.write("500,5")  # a row torn by a kill
    assert rewind_csv(logger.path, "actor_steps", 200) == 2
    assert logger.path.read_text() == "actor_steps,episode_return\n100,10.0\n200,20.0\n"
    resumed = CSVLogger(tmp_path, "loop")  # continues under the same header
    resumed.write({"actor_steps": 300, "episode_return": 31.0})
    resumed.close()
    assert logger.path.read_text().splitlines()[-1] == "300,31.0"


def test_rewind_of_tensorboard_events_shows_each_step_once(tmp_path):
    from dmpo.reporting.logging import TensorBoardLogger
    from dmpo.reporting.rewind import rewind_logs
    from tensorboard_events import shown_scalars

    first = TensorBoardLogger(tmp_path, "learner", step_key="learner_steps")
    for step in range(1, 11):
        first.write({"learner_steps": step, "loss": float(step)})
    first.close()
    killed_files = sorted((tmp_path / "tb" / "learner").iterdir())
    before = [path.read_bytes() for path in killed_files]
    rewind_logs(tmp_path, "learner", "learner_steps", 6)
    assert [path.read_bytes() for path in killed_files] == before  # nothing rewritten: a purge marker
    second = TensorBoardLogger(tmp_path, "learner", step_key="learner_steps")  # in the same second too
    for step in range(7, 13):
        second.write({"learner_steps": step, "loss": float(step) + 0.5})
    second.close()
    events = [(tag, step) for tag, step, _ in shown_scalars(tmp_path / "tb" / "learner")]
    expected = {(tag, step) for tag in ("learner_steps", "loss") for step in range(1, 13)}
    assert sorted(events) == sorted(expected)
    losses = {step: value for tag, step, value in shown_scalars(tmp_path / "tb" / "learner") if tag == "loss"}
    assert losses[6] == 6.0 and losses[7] == 7.5  # the resumed run's values after the checkpoint


def test_make_logger_rewinds_when_told_the_resume_step(tmp_path):
    from dmpo.reporting.logging import make_logger

    logger = make_logger("loop", tmp_path, time_delta=0.0, terminal=False, step_key="actor_steps")
    for step in (10, 20, 30):
        logger.write({"actor_steps": step, "x": 1.0})
    logger.close()
    logger = make_logger("loop", tmp_path, time_delta=0.0, terminal=False, step_key="actor_steps",
                         resume_from_step=10)
    logger.write({"actor_steps": 20, "x": 2.0})
    logger.close()
    lines = (tmp_path / "logs" / "loop" / "logs.csv").read_text().splitlines()
    assert lines == ["actor_steps,x", "10,1.0", "20,2.0"]
    with pytest.raises(ValueError, match="step_key"):
        make_logger("loop", tmp_path, terminal=False, resume_from_step=10)
