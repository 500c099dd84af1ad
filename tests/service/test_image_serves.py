"""The CPU image serves: built by scripts/build_image_cpu.sh (or reused where buildah holds one built from the same
inputs), the README's main job, `thinktier up`, runs inside it as the image's user ray, answers a chat completion
through the openai client, and SIGTERM stops it leaving no process of the container running.

Needs root (mmdebstrap's root mode, buildah's storage) and buildah and mmdebstrap (scripts/install_tools.sh installs
them). No OCI runtime: `buildah run --isolation chroot`, which shares the host's network (hence a free --port, and
HAProxy's fixed ports moved to free ones too) and sets an open-files limit of 1024 unless told otherwise. Marked
integration: the first run on a machine builds the dependencies image (about 10 minutes on 2 cores), later runs only
thinktier's layer on it unless the dependencies changed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from tests.conftest import free_port
from tests.system_tools import system_tool
from thinktier.cluster.local import haproxy_open_files

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "build_image_cpu.sh"
VENV = "/opt/thinktier/venv"
"""The image's virtual environment: in the command line or the PATH of every process of the container."""

Run = Callable[..., "subprocess.Popen[str]"]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def image() -> str:
    if os.getuid() != 0:
        pytest.fail("building and running the image needs root (mmdebstrap's root mode, buildah's storage): run the "
                    "tests as root, as scripts/install_tools.sh needs for buildah and mmdebstrap")
    system_tool("mmdebstrap")
    system_tool("buildah")
    started = time.monotonic()
    built = subprocess.run(["bash", str(BUILD), "--reuse"], capture_output=True, text=True, timeout=2400, check=False)
    assert built.returncode == 0, f"{built.stdout[-4000:]}\n{built.stderr[-4000:]}"
    print(f"{built.stdout.splitlines()[-1]} ({time.monotonic() - started:.0f} s)")
    return subprocess.check_output(["bash", str(BUILD), "--print-image"], text=True).strip()


@pytest.fixture
def run_in_image(image: str) -> Iterator[Run]:
    """run(*command, open_files=N): the command in a new container of the image, as the image's user, under an
    open-files limit (soft and hard) of N; the containers are removed afterwards."""
    containers: list[str] = []

    def run(*command: str, open_files: int) -> subprocess.Popen[str]:
        container = subprocess.check_output(
            ["buildah", "from", "--quiet", "--ulimit", f"nofile={open_files}:{open_files}", image], text=True).strip()
        containers.append(container)
        return subprocess.Popen(["buildah", "run", "--isolation", "chroot", container, "--", *command],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    yield run
    for container in containers:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


def _of_the_image(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return VENV in " ".join(process.cmdline()) or process.environ().get("PATH", "").startswith(VENV)
    return False


def _image_processes() -> list[str]:
    """The processes of any container of the image still running, as 'pid user cmdline'."""
    return [f"{p.pid} {p.uids().real} {' '.join(p.cmdline())[:100]}" for p in psutil.process_iter() if _of_the_image(p)]


def _wait_ready(url: str, proc: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"thinktier up in the image exited with {proc.returncode} before it was ready:\n{proc.stdout.read()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        time.sleep(2)
    pytest.fail(f"thinktier up in the image was not ready after {timeout_s:.0f} s")


def _layers(image: str) -> list[str]:
    template = "{{range .OCIv1.RootFS.DiffIDs}}{{.}} {{end}}"  # buildah 1.28's templates have no json
    return subprocess.check_output(["buildah", "inspect", "--type", "image", "--format", template, image], text=True).split()


def test_the_image_is_thinktier_alone_on_the_dependencies_image(image: str) -> None:
    """A change to the package alone rebuilds one thin layer, not the 5 GB of dependencies under it."""
    image_layers, dependency_layers = _layers(image), _layers(f"{image}-deps")
    assert len(image_layers) == len(dependency_layers) + 1
    assert image_layers[:-1] == dependency_layers


def test_the_image_says_how_to_raise_an_open_files_limit_too_low_for_haproxy(run_in_image: Run) -> None:
    proc = run_in_image("thinktier", "up", "--port", str(free_port()), open_files=1024)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, output
    assert "needs an open-files limit of at least" in output and "--ulimit nofile=" in output, output
    assert "server.http_proxy: serve" in output and "starting Ray" not in output


def test_the_image_serves_the_main_job_as_its_user_and_sigterm_leaves_no_process(run_in_image: Run) -> None:
    assert _image_processes() == [], "no container of the image runs before"
    port = free_port()
    haproxy_ports = {name: str(free_port()) for name in ("RAY_SERVE_HAPROXY_STATS_PORT", "RAY_SERVE_HAPROXY_METRICS_PORT")}
    command = ["env", *(f"{name}={value}" for name, value in haproxy_ports.items()), "thinktier", "up", "--port", str(port)]
    proc = run_in_image(*command, open_files=haproxy_open_files())
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    try:
        _wait_ready(url, proc, timeout_s=900)
        print(f"ready in the image after {time.monotonic() - started:.0f} s")
        launched = [p for p in psutil.Process(proc.pid).children(recursive=True) if _of_the_image(p)]
        (main,) = [p for p in launched if f"{VENV}/bin/thinktier up" in " ".join(p.cmdline())]
        assert main.uids().real == 1000 and main.gids().real == 100, "as the image's user ray"
        commands = " ".join(" ".join(p.cmdline()) for p in launched)
        assert all(name in commands for name in ("gcs_server", "raylet", "VLLM::EngineCore", "haproxy")), commands

        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        completion = client.chat.completions.create(
            model="thinktier", reasoning_effort="low", messages=[{"role": "user", "content": "What is 17 * 23?"}], seed=1,
        )
        message = completion.choices[0].message
        assert message.content and (message.model_extra or {}).get("reasoning"), completion
        assert completion.model == "thinktier-reasoning"

        main.send_signal(signal.SIGTERM)  # as a container runtime stops its command
        output, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, output
        assert "draining requests in flight" in output
        assert _image_processes() == [], f"SIGTERM leaves no process of the container running; thinktier said:\n{output}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for process in psutil.process_iter():
            if _of_the_image(process):
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
