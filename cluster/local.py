"""Run thinktier on this machine: start Ray, deploy the application from a policy, wait until it serves."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import httpx

from cluster.serve_config import APP_NAME
from policies.loader import load_policy

RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _status_line(app_name: str) -> str:
    """One line of deployment states, e.g. 'tier-reasoning: UPDATING, Ingress: HEALTHY'."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return "deploying"
    return ", ".join(f"{name}: {d.status.value}" for name, d in app.deployments.items())


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
        import ray
        from ray import serve

        from deployments.app import AppArgs, build_app

        os.environ.update(RAY_ENV)
        if not ray.is_initialized():
            self.progress("starting Ray")
            ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": RAY_ENV})
            self._owns_ray = True
        serve.start(http_options={"host": self.host, "port": self.port})
        self.progress("deploying the application (engines take tens of seconds to load)")
        app = build_app(AppArgs(policy_path=self.policy_path))
        serve._run(app, name=self.app_name, route_prefix=self.route_prefix, _blocking=False)
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            line = _status_line(self.app_name)
            if line != last:
                self.progress(line)
                last = line
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise TimeoutError(f"thinktier was not ready after {timeout_s:.0f} s; last state: {last}")

    def stop(self) -> None:
        import ray
        from ray import serve

        if not ray.is_initialized():
            return
        if self._owns_ray:
            serve.shutdown()
            ray.shutdown()
        else:
            serve.delete(self.app_name)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
