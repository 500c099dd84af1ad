"""`thinktier bench frontdoor`: the HTTP path alone (client -> Serve HTTP proxy -> Ingress -> tier replica),
measured without a model, against a bare FastAPI floor serving the same streams, in one run.

thinktier here is the real Ingress and LoadBoard, with deployment options from the policy as `cluster/app.py`
binds them, in front of a synthetic tier (loadtest/bench/frontdoor/synthetic_tier.py) that streams tokens at a set rate per
stream through the real coalescing. The floor (loadtest/bench/frontdoor/frontdoor_floor.py) is one uvicorn process serving
the same synthetic stream. Client processes (loadtest/bench/frontdoor/frontdoor_client.py) keep N streams in flight; over
the same window this process samples the CPU of every server process (and of the clients) from /proc. Each
variant (a stream interval, a number of Ingress replicas, a per-stream rate) runs thinktier, then the floor.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import psutil
from ray import serve
from ray.serve import Application

from thinktier.cluster.local import RAY_ENV, check_port_free
from thinktier.cluster.serve_config import deployment_options, ray_env
from thinktier.deployments.request.ingress import INGRESS, Ingress
from thinktier.deployments.request.load_board import LOAD_BOARD, LoadBoard
from thinktier.deployments.request.routing_view import stale_after_s
from thinktier.deployments.tier.tier import tier_deployment_name
from thinktier.loadtest.bench.frontdoor.frontdoor_client import ClientSample, Load, chat_body
from thinktier.loadtest.bench.frontdoor.frontdoor_report import FrontdoorReport, TargetResult, Variant, VariantResult, write
from thinktier.loadtest.bench.frontdoor.frontdoor_settings import BenchSettings
from thinktier.loadtest.bench.frontdoor.synthetic_tier import SyntheticTier
from thinktier.loadtest.bench.process_cpu import classify
from thinktier.policies.loader import load_policy, write_policy_variant

# The processes the bench starts: load-generating clients and the bare FastAPI floor.
CLIENT_MODULE = "thinktier.loadtest.bench.frontdoor.frontdoor_client"
FLOOR_MODULE = "thinktier.loadtest.bench.frontdoor.frontdoor_floor"

APP_NAME = "frontdoor"
HOST = "127.0.0.1"
START_MARGIN_S = 2.0
"""Time the client processes get to start before their first request."""
READY_TIMEOUT_S = 180.0

Groups = dict[str, list[psutil.Process]]


def frontdoor_app(policy_path: str, tokens_per_s: float) -> Application:
    """`thinktier.cluster.app.build_app` with SyntheticTier for TierReplica: the real Ingress and LoadBoard, the policy's
    deployment options, no classifier; every tier streams `tokens_per_s` per stream."""
    policy = load_policy(policy_path)
    options = deployment_options(policy)
    board = serve.deployment(**options[LOAD_BOARD])(LoadBoard).bind(stale_after_s(policy))
    interval_s = policy.server.stream_interval_ms / 1000
    tiers = {
        name: serve.deployment(**options[tier_deployment_name(name)])(SyntheticTier).bind(
            name, tier, board, interval_s, tokens_per_s
        )
        for name, tier in policy.tiers.items()
    }
    return serve.deployment(**options[INGRESS])(Ingress).bind(policy, policy_path, board, tiers)


def policy_variant(settings: BenchSettings, variant: Variant, dest: Path) -> str:
    """The bench policy with the variant's stream interval and Ingress replicas, and `tier_replicas` reasoning replicas."""

    reasoning = load_policy(settings.policy).routing.reasoning_tier

    def edit(data: dict[str, Any]) -> None:
        server = data.setdefault("server", {})
        server["stream_interval_ms"] = variant.interval_ms
        server["http_proxy"] = settings.http_proxy
        server["ingress_replicas"] = {"min": variant.ingress_replicas, "max": variant.ingress_replicas}
        data["tiers"][reasoning]["replicas"] = {"min": settings.tier_replicas, "max": settings.tier_replicas}

    return str(write_policy_variant(settings.policy, edit, dest))


def ray_process_groups() -> Groups:
    """This process's Ray processes by role, classed by title as every CPU figure of the project is
    (loadtest/bench/process_cpu.py): the HTTP proxy (Serve's ProxyActor, or HAProxy in HAProxy mode), the Ingress and tier
    replicas, and the rest (raylet, GCS, Serve controller, LoadBoard, idle workers)."""
    roles = ("ingress", "proxy", "tier")
    groups: Groups = {name: [] for name in [*roles, "ray_other"]}
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            role = classify(" ".join(proc.cmdline()))
            groups[role if role in roles else "ray_other"].append(proc)
    missing = [g for g in roles if not groups[g]]
    if missing:
        raise RuntimeError(f"no {', '.join(missing)} process among Ray's (titled 'ray::ServeReplica:...', 'ray::ProxyActor')")
    return groups


def cpu_seconds(groups: Groups) -> dict[int, float]:
    """User + system CPU seconds of every process (all its threads) so far, by pid; gone processes left out."""
    seconds = {}
    for procs in groups.values():
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                seconds[proc.pid] = times.user + times.system
    return seconds


def group_cpu(groups: Groups, before: dict[int, float], after: dict[int, float]) -> dict[str, list[float]]:
    """CPU seconds between the two samples, per process, by group."""
    return {g: [after[p.pid] - before[p.pid] for p in procs if p.pid in before and p.pid in after]
            for g, procs in groups.items()}


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


def wait_ready(url: str, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server process exited with {process.returncode} before it was ready")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{url}/readyz was not 200 after {READY_TIMEOUT_S:g} s")


def drive(target: str, settings: BenchSettings, variant: Variant, port: int, groups: Groups) -> TargetResult:
    """Keep the streams in flight from client processes; CPU of `groups` and of the clients over the window."""
    start_at = time.monotonic() + START_MARGIN_S
    window_start = start_at + settings.ramp_s(variant)
    window_end = window_start + settings.duration_s
    body = chat_body(settings.thinking_tokens, settings.answer_tokens)
    loads = [Load(HOST, port, body, variant.streams, settings.client_procs, i, start_at, settings.ramp_s(variant),
                  window_start, window_end) for i in range(settings.client_procs)]
    clients = [subprocess.Popen([sys.executable, "-m", CLIENT_MODULE, json.dumps(asdict(load))], stdout=subprocess.PIPE)
               for load in loads]
    groups = groups | {"client": [psutil.Process(c.pid) for c in clients]}
    _sleep_until(window_start)
    t0, before = time.monotonic(), cpu_seconds(groups)
    _sleep_until(window_end)
    t1, after = time.monotonic(), cpu_seconds(groups)
    samples = []
    for client in clients:
        out, _ = client.communicate(timeout=60)
        if client.returncode != 0:
            raise RuntimeError(f"a client process failed (exit {client.returncode}); its error is above")
        samples.append(ClientSample(**json.loads(out)))
    return TargetResult.of(target, ClientSample.merged(samples), group_cpu(groups, before, after), t1 - t0,
                           settings.duration_s, variant.offered_tps)


def measure_thinktier(settings: BenchSettings, variant: Variant, policy_path: str) -> TargetResult:
    from ray import serve

    serve.run(frontdoor_app(policy_path, variant.tokens_per_stream_per_s), name=APP_NAME, route_prefix="/", blocking=False)
    try:
        wait_ready(f"http://{HOST}:{settings.port}")
        groups = ray_process_groups()
        return drive("thinktier", settings, variant, settings.port, groups)
    finally:
        serve.delete(APP_NAME)


def measure_floor(settings: BenchSettings, variant: Variant) -> TargetResult:
    port = settings.port + 1
    command = [sys.executable, "-m", FLOOR_MODULE, "--port", str(port), "--workers", str(settings.floor_workers),
               "--tokens-per-s", str(variant.tokens_per_stream_per_s), "--interval-ms", str(variant.interval_ms)]
    floor = subprocess.Popen(command)
    try:
        wait_ready(f"http://{HOST}:{port}", floor)
        server = psutil.Process(floor.pid)
        return drive("floor", settings, variant, port, {"floor": [server, *server.children(recursive=True)]})
    finally:
        floor.terminate()
        floor.wait(timeout=30)


@contextlib.contextmanager
def ray_serve(port: int, front_door_env: dict[str, str]) -> Iterator[None]:
    """Ray and Serve in this process, the HTTP front door on `port`."""
    import ray
    from ray import serve

    env = RAY_ENV | front_door_env
    os.environ.update(env)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    try:
        serve.start(http_options={"host": HOST, "port": port})
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def run(settings: BenchSettings, command: str, progress: Callable[[str], None] = print) -> FrontdoorReport:
    """Every variant, thinktier then the floor; the report is rewritten after each variant."""
    for port in (settings.port, settings.port + 1):
        check_port_free(HOST, port)
    variants = settings.variants()
    report = FrontdoorReport(command=command, settings=settings.as_dict(), variants=[])
    server = load_policy(settings.policy).server.model_copy(update={"http_proxy": settings.http_proxy})
    with ray_serve(settings.port, ray_env(server)), tempfile.TemporaryDirectory(prefix="thinktier-frontdoor-") as tmp:
        for n, variant in enumerate(variants, 1):
            window = f"{settings.ramp_s(variant):.1f} s ramp + {settings.duration_s:g} s"
            progress(f"[frontdoor {n}/{len(variants)}] {variant.label}: thinktier ({window})")
            thinktier = measure_thinktier(settings, variant, policy_variant(settings, variant, Path(tmp) / f"policy-{n}.yaml"))
            progress(f"[frontdoor {n}/{len(variants)}] floor ({window})")
            floor = measure_floor(settings, variant)
            report.variants.append(VariantResult(variant=variant, thinktier=thinktier, floor=floor))
            paths = write(report, settings.out)
            progress(f"[frontdoor {n}/{len(variants)}] thinktier {thinktier.achieved_tps:,.0f} tok/s "
                     f"({thinktier.server_cores_per_1k_tps or 0:.3f} cores per 1k tok/s), floor {floor.achieved_tps:,.0f} "
                     f"tok/s ({floor.server_cores_per_1k_tps or 0:.3f}) -> {paths[1]}")
    return report
