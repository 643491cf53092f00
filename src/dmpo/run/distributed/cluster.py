"""Where the distributed program runs: a private local Ray cluster, or an existing one.

`ray_cluster(address, num_cpus)` is a context manager that yields a `ClusterInfo`:

* `address=None` and Ray not yet initialised in this process: start a local cluster bound to the
  loopback interface only (no dashboard) with Ray's token authentication on, and shut it down —
  waiting for its processes to exit — when the block ends, however it ends.
* `address` given: join that cluster; leave it running at the end (only our own actors are killed,
  by the program).
* Ray already initialised in this process (a test fixture, a notebook): reuse it and leave it alone.

Why the loopback dance: Ray resolves "127.0.0.1" to the machine's routable address unless its
"local-only" switch (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`) is off; that switch is read when Ray is
imported, so we set the variable for the child processes and the module flag for this process only
while the cluster starts.

Why the token: loopback ports are open to every user of the machine, and anyone who can talk to a
Ray cluster can run code as its owner. Each private cluster gets a fresh random token
(`RAY_AUTH_MODE=token`, `RAY_AUTH_TOKEN`): Ray's servers refuse every gRPC/HTTP request without it.
It lives only in the environment of this process and of the cluster's processes (which inherit it;
/proc/<pid>/environ is readable by the owner only), never in a file or a log line; when the cluster
shuts down, this process's RAY_AUTH_MODE, RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH (and the agent start-up
timeout it lengthens, `_AGENT_REGISTER_TIMEOUT_MS`) are put back as they were, so later child processes
do not inherit a dead cluster's token.

Session files: a private cluster keeps them (logs, sockets) in a fresh `dmpo-ray-*` folder of the
system temp folder that only its owner can enter (0700), in a `ray` folder inside it. Ray makes the
folders it creates world-writable (0777), the one it is given included, and every new Ray worker
process does it again when it starts: so the owner-only folder is the one above Ray's, which no Ray
process touches, and through which alone the files below can be reached. It is removed when the
cluster stops, unless `keep_files` asks to keep it for a post-mortem.

A driver killed outright (SIGKILL after a scheduler's grace period) cannot stop its cluster: a reaper
started with the cluster does it then (`dmpo.run.distributed.reaper`). A start cut short by a signal
stops what it started itself, before the signal goes on.
Every private Ray API this needs lives in `dmpo.run.distributed.ray_internals`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator

import ray

from dmpo.run.distributed import ray_internals, reaper

_LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """What the program needs to know about the cluster it runs on."""

    address: str
    """GCS address (host:port) of the cluster."""
    session_dir: str | None
    """Ray's session directory (logs, sockets); None when unknown (joined cluster)."""
    owned: bool
    """True when this call started the cluster and will shut it down."""
    num_gpus: float
    """GPUs Ray reports for the whole cluster."""
    private_folder: str | None = None
    """The owner-only `dmpo-ray-*` folder holding a private cluster's session files (else None)."""


_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_agent_register_timeout_ms")
# The raylet gives its Python agents this long to report their ports before it aborts. Ray's default
# (15 s) ran out on this project's 2-core machines under load (a raylet crash "Timed out waiting for
# file .../metrics_agent_port_..."); a user's own value is kept.
_AGENT_REGISTER_TIMEOUT_MS = "120000"
_saved_env: dict[str, str | None] | None = None  # the variables above before start_local_cluster
_private_folder: str | None = None  # the dmpo-ray-* folder of the running private cluster
_reaper: reaper.Reaper | None = None  # what stops that cluster if this process dies outright


def _use_private_token() -> None:
    """Switch this process (and the processes it starts) to token authentication with a new token;
    `_restore_environment` puts the user's variables back."""
    import secrets

    global _saved_env
    if _saved_env is None:
        _saved_env = {name: os.environ.get(name) for name in _AUTH_ENV}
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)  # 256 bits, as Ray's own generator
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)  # the variable above must be the token used
    if _saved_env["RAY_agent_register_timeout_ms"] is None:
        os.environ["RAY_agent_register_timeout_ms"] = _AGENT_REGISTER_TIMEOUT_MS
    ray_internals.reset_auth_caches()


def _restore_environment() -> None:
    """Puts back the authentication variables saved by `_use_private_token` (none set: removed)."""
    global _saved_env
    if _saved_env is None:
        return
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env = None
    ray_internals.reset_auth_caches()


def stop_local_cluster(*, keep_files: bool = False) -> None:
    """Shuts down the cluster `start_local_cluster` started (waiting for its processes), restores
    this process's environment as it was before and removes the cluster's `dmpo-ray-*` folder (unless
    `keep_files`: then one line says where it is)."""
    global _private_folder, _reaper
    try:
        ray.shutdown(wait_for_processes=True)
    finally:
        _restore_environment()
        folder, _private_folder = _private_folder, None
        if folder is not None and keep_files:
            print(f"dmpo: Ray's session files (logs) of this run are kept in {folder}", flush=True)
        elif folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        if _reaper is not None:
            _reaper.finish()
            _reaper = None


def start_local_cluster(num_cpus: int | None = None, *, object_store_memory: int | None = None,
                        keep_files: bool = False) -> ClusterInfo:
    """Start a private Ray cluster on this machine, reachable from localhost only (`keep_files`: its
    session files stay if this process dies outright)."""
    if num_cpus is not None and (not isinstance(num_cpus, int) or num_cpus < 1):
        raise ValueError(f"num_cpus must be a positive integer or None, got {num_cpus!r}")
    global _private_folder, _reaper
    _use_private_token()
    # Session files (logs, sockets) in a folder only this user can enter (module docstring).
    private_folder = tempfile.mkdtemp(prefix="dmpo-ray-")  # 0700
    try:
        _reaper = reaper.start(private_folder, keep_files=keep_files)
        with (ray_internals.local_only_binding(), ray_internals.own_process_groups(),
              ray_internals.keep_signal_handlers()):
            context = ray.init(
                # "local": always a new cluster. With None, Ray joins the cluster named in
                # /tmp/ray/ray_current_cluster (any `ray start` on the machine, by any user).
                address="local",
                num_cpus=num_cpus,
                include_dashboard=False,
                dashboard_host=_LOOPBACK,
                _node_ip_address=_LOOPBACK,
                object_store_memory=object_store_memory,
                configure_logging=False,
                log_to_driver=True,
                **{ray_internals.TEMP_DIR_ARGUMENT: os.path.join(private_folder, "ray")},
            )
    except BaseException:  # e.g. a signal: what started so far is stopped here (its reaper included)
        with contextlib.suppress(Exception):
            if ray.is_initialized():
                ray.shutdown(wait_for_processes=False)
        reaper.reap(os.environ["RAY_AUTH_TOKEN"], private_folder)
        _reaper = None
        _restore_environment()
        shutil.rmtree(private_folder, ignore_errors=True)
        raise
    _private_folder = private_folder
    ray_internals.short_raylet_reports()
    info = context.address_info
    return ClusterInfo(address=info["address"], session_dir=info.get("session_dir"), owned=True,
                       num_gpus=float(ray.cluster_resources().get("GPU", 0.0)), private_folder=private_folder)


def _joined(owned: bool = False) -> ClusterInfo:
    ray_internals.short_raylet_reports()
    context = ray.get_runtime_context()
    address = context.gcs_address
    return ClusterInfo(address=address, session_dir=ray_internals.session_dir(), owned=owned,
                       num_gpus=float(ray.cluster_resources().get("GPU", 0.0)))


class ClusterError(RuntimeError):
    """The Ray cluster at the address given cannot be joined: one line saying why."""


def _join(address: str) -> None:
    """`ray.init(address)`, or `ClusterError`: at once when nothing listens there (Ray itself retries
    for a minute), in one line when Ray refuses (e.g. the token)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if host and port.isdigit() and address not in ("auto", "local"):
        try:
            socket.create_connection((host, int(port)), timeout=10).close()
        except OSError as error:
            reason = error.strerror or error
            raise ClusterError(f"cannot reach a Ray cluster at {address} ({reason})") from None
    try:
        with ray_internals.keep_signal_handlers():
            ray.init(address=address, configure_logging=False, log_to_driver=True)
    except Exception as error:  # noqa: BLE001 - Ray raises many kinds; the first line says why
        if ray.is_initialized():
            ray.shutdown()
        lines = str(error).strip().splitlines() or [""]
        raise ClusterError(f"cannot join the Ray cluster at {address} ({type(error).__name__}: "
                           f"{lines[0]})") from None


@contextlib.contextmanager
def ray_cluster(address: str | None = None, *, num_cpus: int | None = None,
                keep_files: bool = False) -> Iterator[ClusterInfo]:
    """Run the block on a Ray cluster (see the module docstring for which one); `keep_files` keeps a
    private cluster's session files when it stops."""
    if ray.is_initialized():
        yield _joined()
        return
    if address is None:
        cluster = start_local_cluster(num_cpus, keep_files=keep_files)
    else:  # the cluster's own authentication applies (RAY_AUTH_MODE / a token of the user's)
        _join(address)
        cluster = dataclasses.replace(_joined(), owned=False)
    try:
        yield cluster
    finally:
        from dmpo.lifecycle.interrupts import critical

        # A joined cluster is left running; either way this process disconnects. A signal waits for
        # it: a shutdown cut in half leaves Ray's processes behind.
        with critical():
            if cluster.owned:
                stop_local_cluster(keep_files=keep_files)
            else:
                ray.shutdown(wait_for_processes=False)
