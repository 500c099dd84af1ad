"""`thinktier policy apply` against kmock, an in-memory Kubernetes API server the real client talks HTTP to."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import kmock
import pytest
import yaml
from kubernetes import client

from thinktier.cli.main import main as thinktier_main
from thinktier.cluster.kube import CREATED, UNCHANGED, UPDATED, NeedsHelmUpgrade, apply_policy
from thinktier.policies.loader import DEFAULT_POLICY, PolicyError

NAMESPACE = "llm"
CONFIGMAP = "thinktier-policy"


class FakeApiServer:
    """kmock's Kubernetes emulator served on a local port from a background event loop."""

    def __init__(self) -> None:
        self.url = ""
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),), daemon=True)

    async def _serve(self) -> None:
        async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        assert self._ready.wait(10), "kmock did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


@pytest.fixture
def api(server: FakeApiServer) -> client.CoreV1Api:
    configuration = client.Configuration()
    configuration.host = server.url
    return client.CoreV1Api(client.ApiClient(configuration))


def _policy_data(api: client.CoreV1Api) -> dict[str, str]:
    return api.read_namespaced_config_map(CONFIGMAP, NAMESPACE).data


def test_creates_the_configmap_then_updates_only_its_key(api: client.CoreV1Api, tmp_path: Path) -> None:
    text = DEFAULT_POLICY.read_text()
    assert apply_policy(DEFAULT_POLICY, configmap=CONFIGMAP, namespace=NAMESPACE, api=api) == CREATED
    assert _policy_data(api) == {"policy.yaml": text}

    api.patch_namespaced_config_map(CONFIGMAP, NAMESPACE, {"data": {"notes.txt": "kept"}})
    edited = tmp_path / "policy.yaml"
    edited.write_text(text.replace("thresholds: {reasoning: 0.3,", "thresholds: {reasoning: 0.45,"))
    assert apply_policy(edited, configmap=CONFIGMAP, namespace=NAMESPACE, api=api) == UPDATED
    data = _policy_data(api)
    assert yaml.safe_load(data["policy.yaml"])["routing"]["thresholds"]["reasoning"] == 0.45
    assert data["notes.txt"] == "kept"
    assert apply_policy(edited, configmap=CONFIGMAP, namespace=NAMESPACE, api=api) == UNCHANGED


def test_custom_key(api: client.CoreV1Api) -> None:
    apply_policy(DEFAULT_POLICY, configmap=CONFIGMAP, namespace=NAMESPACE, key="routing.yaml", api=api)
    assert set(_policy_data(api)) == {"routing.yaml"}


def test_refuses_an_invalid_policy_and_keeps_the_serving_one(api: client.CoreV1Api, tmp_path: Path) -> None:
    apply_policy(DEFAULT_POLICY, configmap=CONFIGMAP, namespace=NAMESPACE, api=api)
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEFAULT_POLICY.read_text().replace("thresholds: {reasoning: 0.3,", "thresholds: {reasoning: 0.9,"))
    with pytest.raises(PolicyError, match="thresholds must be in order"):
        apply_policy(bad, configmap=CONFIGMAP, namespace=NAMESPACE, api=api)
    assert _policy_data(api) == {"policy.yaml": DEFAULT_POLICY.read_text()}


def test_refuses_what_a_configmap_update_cannot_bring_into_the_pods(api: client.CoreV1Api, tmp_path: Path) -> None:
    apply_policy(DEFAULT_POLICY, configmap=CONFIGMAP, namespace=NAMESPACE, api=api)
    serving = yaml.safe_load(DEFAULT_POLICY.read_text())
    more_seqs = yaml.safe_load(DEFAULT_POLICY.read_text())
    more_seqs["tiers"]["reasoning"]["engine"]["max_num_seqs"] = 7  # deploy-time: serveConfigV2 holds it too
    new_tenant = yaml.safe_load(DEFAULT_POLICY.read_text())
    new_tenant["tenants"] = {"beta": {"api_key_env": "BETA_KEY"}}  # its key variable is in no pod's environment
    for edit, field in ((more_seqs, "tiers.reasoning.engine.max_num_seqs"), (new_tenant, "tenants.beta.api_key_env")):
        path = tmp_path / "policy.yaml"
        path.write_text(yaml.safe_dump(edit))
        with pytest.raises(NeedsHelmUpgrade, match="helm upgrade") as refused:
            apply_policy(path, configmap=CONFIGMAP, namespace=NAMESPACE, api=api)
        assert any(f.startswith(field) for f in refused.value.fields), refused.value.fields
        assert yaml.safe_load(_policy_data(api)["policy.yaml"]) == serving  # nothing written


def test_taking_the_metrics_key_away_is_applied_live(api: client.CoreV1Api, tmp_path: Path) -> None:
    keyed = yaml.safe_load(DEFAULT_POLICY.read_text())
    keyed.setdefault("server", {})["metrics_api_key_env"] = "THINKTIER_METRICS_KEY"
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(keyed))
    apply_policy(path, configmap=CONFIGMAP, namespace=NAMESPACE, api=api)
    del keyed["server"]["metrics_api_key_env"]  # no variable the pods lack: nothing for helm to bring in
    path.write_text(yaml.safe_dump(keyed))
    assert apply_policy(path, configmap=CONFIGMAP, namespace=NAMESPACE, api=api) == UPDATED


def test_cli_applies_through_a_kubeconfig_context(
    server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
        "users": [{"name": "dev", "user": {"token": "t"}}],
        "contexts": [{"name": "fake-ctx", "context": {"cluster": "fake", "user": "dev"}}],
        "current-context": "fake-ctx",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(path))
    argv = ["policy", "apply", str(DEFAULT_POLICY), "--configmap", CONFIGMAP, "--namespace", NAMESPACE, "--context", "fake-ctx"]
    assert thinktier_main(argv) == 0
    configuration = client.Configuration()
    configuration.host = server.url
    data = client.CoreV1Api(client.ApiClient(configuration)).read_namespaced_config_map(CONFIGMAP, NAMESPACE).data
    assert data == {"policy.yaml": DEFAULT_POLICY.read_text()}

    bad = tmp_path / "bad.yaml"
    bad.write_text("tiers: {}\nbogus: 1\n")
    assert thinktier_main(["policy", "apply", str(bad), *argv[3:]]) == 1
    assert "bogus" in capsys.readouterr().out
