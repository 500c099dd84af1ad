"""Run thinktier on this machine: start Ray, deploy the application from a policy, wait until it serves."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import httpx

from thinktier.cluster.serve_config import APP_NAME, http_options, ray_env
from thinktier.deployments.tier.models import resolve_model
from thinktier.policies.loader import load_policy

RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "1", "TOKENIZERS_PARALLELISM": "false"}
FAILED_STATES = frozenset({"DEPLOY_FAILED", "UNHEALTHY"})
"""Deployment (and application) states that waiting will not fix."""


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
                f"cannot serve on {host}:{port}: {exc.strerror}; stop what listens there or pass --port"
            ) from None


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

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.route_prefix.rstrip('/')}"

    def start(self, timeout_s: float = 600) -> LocalCluster:
        """Start Ray and Serve and deploy; raises StartupError with the cause (a replica's own error included)."""
        import ray

        if not ray.is_initialized():
            check_port_free(self.host, self.port)
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
        os.environ.update(env)
        self.progress("starting Ray")
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
        """Delete the application, then stop Serve and Ray where this process started them. Deleting drains: each
        replica stops once its requests have ended, or at the policy's server.drain_timeout_s, while Serve's proxy
        still carries their streams (serve.shutdown alone stops the proxies at once and cuts every stream)."""
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

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
