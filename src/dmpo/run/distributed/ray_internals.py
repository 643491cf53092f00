"""Every use of Ray's private API in dmpo, in one place (`tests/test_ray_internals.py` checks each).

Ray keeps no compatibility promise for these names; `pyproject.toml` caps Ray below its next major
version, and the test fails naming the missing name when a Ray release moves one. What each is for:

* `ray._private.ray_constants.ENABLE_RAY_CLUSTER`: Ray's "local-only" switch, read when Ray is
  imported; flipped while a private cluster starts so that its servers bind to 127.0.0.1
  (`dmpo.run.distributed.cluster`).
* `ray._raylet.Config.initialize` and `ray._raylet.AuthenticationTokenLoader`: Ray caches its
  config and its authentication token per process; both are reset after the token in the
  environment changes.
* `ray._private.worker._global_node.get_session_dir_path`: the session directory of the cluster this
  process is connected to (Ray has no public accessor).
* `ray.init(_temp_dir=...)`: where a private cluster keeps its session files.
* `ray._private.state.actors` and `ActorHandle._actor_id`: the state of one Ray actor in the
  cluster's actor table (waiting for a place, alive, dead), read by `dmpo.run.distributed.placement`.
* `ray._private.services.ConsolePopen`: how Ray starts its servers; wrapped while a private cluster
  starts so that each server leads its own process group. A scheduler, systemd or a terminal signals
  the whole process group of `dmpo train`: Ray's servers would die with it and take the learner,
  and the final checkpoint the signal asks for, with them. The driver stops them itself.
* `ray._private.utils.set_sigterm_handler`: `ray.init` replaces the driver's SIGTERM handler with one
  that exits at once; kept from doing so, so that SIGTERM takes dmpo's stop path at every moment.
* `ray._private.worker.print_to_stdstream`: how the driver prints what the cluster publishes to it.
  When a node's raylet dies, each of that node's agents publishes "Raylet is terminated" with the
  raylet's last 20 log lines (`[state-dump] ...`): about fifty lines, twice. The driver prints the
  first sentence once; the lines stay in that node's `raylet.out`, and dmpo's own line names the
  nodes the run lost.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["PRIVATE_NAMES", "TEMP_DIR_ARGUMENT", "WAITING_STATES", "actor_id", "actor_state",
           "keep_signal_handlers", "local_only_binding", "own_process_groups", "reset_auth_caches",
           "session_dir", "short_raylet_reports"]

LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
TEMP_DIR_ARGUMENT = "_temp_dir"
PRIVATE_NAMES = (  # (module, attribute path) of every private name used here
    ("ray._private.ray_constants", "ENABLE_RAY_CLUSTER"),
    ("ray._raylet", "Config.initialize"),
    ("ray._raylet", "AuthenticationTokenLoader.instance"),
    ("ray._private.worker", "_global_node"),
    ("ray._private.state", "actors"),
    ("ray.actor", "ActorHandle._actor_id"),
    ("ray._private.services", "ConsolePopen"),
    ("ray._private.utils", "set_sigterm_handler"),
    ("ray._private.worker", "print_to_stdstream"),
)
RAYLET_DIED = "Raylet is terminated"
RAYLET_LOG_TAIL = " Last "  # where Ray's report starts quoting the raylet's log
WAITING_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "RESTARTING")
"""Actor table states of an actor that has no process yet (no place on the cluster, or not yet)."""


@contextlib.contextmanager
def local_only_binding() -> Iterator[None]:
    """Make Ray bind every server of a new local cluster to the loopback interface."""
    from ray._private import ray_constants

    old_env = os.environ.get(LOCAL_ONLY_ENV)
    old_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOCAL_ONLY_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old_flag
        if old_env is None:
            os.environ.pop(LOCAL_ONLY_ENV, None)
        else:
            os.environ[LOCAL_ONLY_ENV] = old_env


def reset_auth_caches() -> None:
    """Make this process read RAY_AUTH_MODE / RAY_AUTH_TOKEN from the environment again."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def session_dir() -> str | None:
    """The session directory of the cluster this process is connected to, or None."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    return getattr(node, "get_session_dir_path", lambda: None)()


def actor_id(handle: object) -> str:
    """The hex id of a Ray actor handle."""
    return handle._actor_id.hex()  # type: ignore[attr-defined]


def actor_state(actor_hex_id: str) -> str | None:
    """The actor's state in the cluster's actor table ("ALIVE", "PENDING_CREATION", ...), or None."""
    from ray._private import state

    try:
        info = state.actors(actor_id=actor_hex_id)
    except Exception:  # the table cannot be read right now: say nothing rather than guess
        return None
    return info.get("State") if isinstance(info, dict) else None


@contextlib.contextmanager
def own_process_groups() -> Iterator[None]:
    """Every process Ray starts in the block leads a process group of its own (module docstring)."""
    from ray._private import services

    original = services.ConsolePopen

    class OwnGroupPopen(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object, preexec_fn: object = None, **kwargs: object) -> None:
            def prepare() -> None:
                os.setpgid(0, 0)
                if callable(preexec_fn):
                    preexec_fn()

            super().__init__(*args, preexec_fn=prepare, **kwargs)

    services.ConsolePopen = OwnGroupPopen
    try:
        yield
    finally:
        services.ConsolePopen = original


@contextlib.contextmanager
def keep_signal_handlers() -> Iterator[None]:
    """`ray.init` in the block leaves this process's SIGTERM handler as it is (module docstring)."""
    from ray._private import utils

    original = utils.set_sigterm_handler
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = original


def shorten_raylet_report(message: str) -> str:
    """A raylet's death report without the log lines it quotes (module docstring)."""
    if not message.startswith(RAYLET_DIED) or RAYLET_LOG_TAIL not in message:
        return message
    head = message[:message.index(RAYLET_LOG_TAIL)].rstrip()
    return f"{head} Its last log lines are in raylet.out in that node's Ray session folder."


def short_raylet_reports() -> None:
    """From now on this driver prints each raylet death report shortened, and the same report once
    (module docstring). Idempotent."""
    from ray._private import worker

    original = worker.print_to_stdstream
    if getattr(original, "_dmpo_short_reports", False):
        return
    printed: set[str] = set()

    def print_to_stdstream(data: dict, ignore_prefix: bool) -> None:
        lines = data.get("lines") or []
        if data.get("pid") == "raylet" and lines and str(lines[0]).startswith(RAYLET_DIED):
            report = shorten_raylet_report(str(lines[0]))
            if report in printed:
                return
            printed.add(report)
            data = {**data, "lines": [report]}
        original(data, ignore_prefix)

    print_to_stdstream._dmpo_short_reports = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_to_stdstream
