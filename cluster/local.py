"""Run thinktier on this machine: start Ray, deploy the application from a policy, wait until it serves."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import httpx
import psutil

from thinktier.cluster.reaper import MARKER_ENV, start_reaper
from thinktier.cluster.serve_config import APP_NAME, http_options, ray_env, serve_application
from thinktier.deployments.tier.models import resolve_model
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import Server

RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "1", "TOKENIZERS_PARALLELISM": "false"}
FAILED_STATES = frozenset({"DEPLOY_FAILED", "UNHEALTHY"})
"""Deployment (and application) states that waiting will not fix."""
HAPROXY_OWN_FDS = 32
"""File descriptors HAProxy counts beyond its connections, pipes and threads (listeners, sockets, its own): Ray 2.60's
default configuration asks for 10276 in all, 24 of them these."""


class StartupError(RuntimeError):
    """thinktier could not start; the message says why and where to look."""


def _exception_line(message: str) -> str:
    """The exception line of a Ray Serve status message that ends with a traceback (its first line otherwise)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Exit)\w*(\(\w+\))?: ", line)]
    return (errors or lines or ["(no message)"])[-1]


def _logs_dir() -> str:
    import ray

    node = ray._private.worker._global_node  # the local node's session; public APIs expose no log path
    return str(Path(node.get_logs_dir_path()) / "serve") if node is not None else "/tmp/ray/session_latest/logs/serve"


def check_port_free(host: str, port: int) -> None:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise StartupError(
                f"cannot serve on {host}:{port}: {exc.strerror}{port_holder(port)}; stop what listens there or pass --port"
            ) from None


def port_holder(port: int) -> str:
    """Who listens on `port`, as a clause for an error message ("" when this user cannot see it): its pid and name, and
    whether an earlier local launch left it (a HAProxy outlives a `thinktier up` killed with its reaper)."""
    with contextlib.suppress(psutil.Error):
        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                process = psutil.Process(conn.pid)
                launch = process.environ().get(MARKER_ENV)
                left = f", left by the thinktier launch {launch}: `kill {conn.pid}` ends it" if launch else ""
                return f" (pid {conn.pid}, {process.name()}{left})"
    return ""


def haproxy_open_files() -> int:
    """The open-files limit HAProxy raises itself to at start, below which it dies ("Cannot raise FD limit"): two per
    connection of Ray's RAY_SERVE_HAPROXY_MAXCONN (front and back), two per splice pipe (a quarter of the connections),
    three per thread of RAY_SERVE_HAPROXY_NBTHREAD (its poller and wake-up pipe), and its own."""
    from ray.serve._private.constants import RAY_SERVE_HAPROXY_MAXCONN, RAY_SERVE_HAPROXY_NBTHREAD

    maxconn, threads = RAY_SERVE_HAPROXY_MAXCONN, RAY_SERVE_HAPROXY_NBTHREAD
    return 2 * maxconn + 2 * (maxconn // 4) + 3 * threads + HAPROXY_OWN_FDS


def check_open_files(server: Server) -> None:
    """Where the policy puts HAProxy in front (`server.http_proxy: haproxy`), raises this process's soft open-files limit,
    which Ray's processes and HAProxy inherit, to what HAProxy needs; a hard limit below that is a StartupError that says
    how to raise it, or to do without HAProxy."""
    if server.http_proxy != "haproxy":
        return
    needed = haproxy_open_files()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard == resource.RLIM_INFINITY or hard >= needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        return
    raise StartupError(
        f"server.http_proxy: haproxy needs an open-files limit of at least {needed} (HAProxy asks for it at start), but "
        f"this process may open at most {hard} (soft {soft}, hard {hard}). Raise it where thinktier runs: in a shell "
        f"`ulimit -n {needed}` (above the hard limit as root, or in /etc/security/limits.conf), for a container "
        f"`docker run --ulimit nofile={needed}:{needed}` (podman and buildah: the same --ulimit), on Kubernetes the "
        "node's container runtime (containerd's LimitNOFILE); or set `server.http_proxy: serve` in the policy, Ray "
        "Serve's own proxy, which needs no such limit"
    )


def _app_state(app_name: str) -> tuple[str, str | None]:
    """One line of deployment states ('tier-reasoning: UPDATING, Ingress: HEALTHY') and the first failure, if any."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return "deploying", None
    line = ", ".join(f"{name}: {d.status.value}" for name, d in app.deployments.items())
    for name, deployment in app.deployments.items():
        if deployment.status.value in FAILED_STATES:
            return line, f"{name} is {deployment.status.value}: {_exception_line(deployment.message)}"
    if app.status.value in FAILED_STATES:
        return line, f"application {app_name} is {app.status.value}: {_exception_line(app.message)}"
    return line, None


class LocalCluster:
    """A local Ray + Serve running thinktier. A context manager; `url` is the HTTP endpoint.

    When Ray already runs in this process (a test session), the application is added to it under
    `app_name` and `route_prefix`, and `stop()` deletes only that application."""

    def __init__(
        self, policy_path: str | Path | None = None, port: int | None = None, host: str | None = None,
        num_cpus: int | None = None, progress: Callable[[str], None] | None = None,
        app_name: str = APP_NAME, route_prefix: str = "/",
    ) -> None:
        self.policy_path = str(Path(policy_path).resolve()) if policy_path else None
        self.policy = load_policy(self.policy_path)  # fail fast, before Ray starts, on a bad policy
        self.host = host or self.policy.server.host
        self.port = port or self.policy.server.port
        self.num_cpus = num_cpus or os.cpu_count() or 2
        self.progress = progress or (lambda _line: None)
        self.app_name = app_name
        self.route_prefix = route_prefix
        self._owns_ray = False
        self._launch_id = uuid.uuid4().hex
        self._reaper: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.route_prefix.rstrip('/')}"

    def start(self, timeout_s: float = 600) -> LocalCluster:
        """Start Ray and Serve and deploy; raises StartupError with the cause (a replica's own error included)."""
        import ray

        if not ray.is_initialized():
            check_port_free(self.host, self.port)
            check_open_files(self.policy.server)
        self._prepare_models()
        if not ray.is_initialized():
            self._start_ray()
        try:
            self._deploy(timeout_s)
        except BaseException:
            self.stop()  # a failed start leaves no application (and no Ray of ours) behind
            raise
        return self

    def _start_ray(self) -> None:
        import ray

        env = RAY_ENV | ray_env(self.policy.server)  # set before Ray starts: Serve reads it once
        self.progress("starting Ray")
        self._reaper = start_reaper(self._launch_id)  # before Ray: it ends what Ray starts, however this process ends
        os.environ.update(env | {MARKER_ENV: self._launch_id})
        try:
            ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
        except Exception as exc:
            line = _exception_line(str(exc))
            raise StartupError(f"Ray did not start: {line} (logs: /tmp/ray/session_latest/logs)") from exc
        self._owns_ray = True

    def _deploy(self, timeout_s: float) -> None:
        from ray import serve

        from thinktier.cluster.app import AppArgs, build_app

        try:
            serve.start(http_options=http_options(self.policy.server, self.host) | {"port": self.port})
        except Exception as exc:  # e.g. HAProxy mode without its binary
            raise StartupError(f"Ray Serve did not start: {_exception_line(str(exc))}; logs: {_logs_dir()}") from exc
        self.progress("deploying the application (engines take tens of seconds to load)")
        if self.policy.shared_capacity:  # Ray Serve takes an application-level autoscaling policy only from a config
            from ray.serve.context import _get_global_client
            from ray.serve.schema import ServeDeploySchema

            client = _get_global_client()
            if client is None:
                raise StartupError(f"Ray Serve is not running; logs: {_logs_dir()}")
            application = serve_application(self.policy, self.policy_path, False, self.app_name, self.route_prefix)
            client.deploy_apps(ServeDeploySchema.model_validate({"applications": [application]}))
        else:
            app = build_app(AppArgs(policy_path=self.policy_path))
            serve._run(app, name=self.app_name, route_prefix=self.route_prefix, _blocking=False)
        self._wait_ready(timeout_s)

    def _prepare_models(self) -> None:
        """Build the builtin models here, before Ray starts, so a missing package fails at once and with its fix."""
        for spec in sorted({tier.model for tier in self.policy.tiers.values()}):
            self.progress(f"model {spec}")
            try:
                resolve_model(spec)
            except (RuntimeError, ValueError) as exc:
                raise StartupError(f"model {spec} cannot be resolved: {exc}") from exc

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            line, failure = _app_state(self.app_name)
            if line != last:
                self.progress(line)
                last = line
            if failure is not None:
                raise StartupError(f"{failure}\n  full log: {_logs_dir()} (controller_*.log, replica_*.log)")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise StartupError(f"thinktier was not ready after {timeout_s:.0f} s; last state: {last}; logs: {_logs_dir()}")

    def stop(self) -> None:
        """Delete the application, then stop Serve and Ray where this process started them, and every process that Ray
        started with them. Deleting drains: each replica stops once its requests have ended, or at the policy's
        server.drain_timeout_s, while Serve's proxy still carries their streams (serve.shutdown alone stops the proxies
        at once and cuts every stream)."""
        import ray
        from ray import serve
        from ray.serve.exceptions import RayServeException

        if not ray.is_initialized():
            return
        with contextlib.suppress(RayServeException):  # Serve never started
            serve.delete(self.app_name)
        if self._owns_ray:
            serve.shutdown()
            ray.shutdown()
            self._owns_ray = False
        if self._reaper is not None:  # it ends what is left (ray.shutdown kills the raylet a second after asking it to stop)
            self._reaper.communicate()
            self._reaper = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
