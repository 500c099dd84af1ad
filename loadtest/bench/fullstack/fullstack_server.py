"""The config's server in its own process group: started, waited for until ready, stopped so that the GPUs are
empty for the next config; and the lines of Ray's logs worth printing."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from thinktier.loadtest.bench.fullstack.fullstack_sampler import gpu_pids
from thinktier.loadtest.bench.fullstack.fullstack_settings import Clock
from thinktier.loadtest.ray_llm_target import PEER_READY_LINE

UP_ERROR_MARKS = ("thinktier up:", "Traceback", "Error", PEER_READY_LINE)
"""Lines of the server's log worth printing besides `up`'s progress lines, which start with '[elapsed]'."""
RAY_LOGS = Path("/tmp/ray/session_latest/logs")
RAY_ERROR_MARKS = ("Error", "Traceback", "CUDA out of memory", "Exception", "Failed to")
RAY_LOG_SUFFIXES = (".log", ".err", ".out")
"""Ray's log files; its debug_state*.txt count failures by the dozen, mostly zero."""
ENGINE_LOG_MARKS = ("GPU KV cache size", "Maximum concurrency")


def ray_log_lines(marks: Sequence[str], limit: int, since_unix: float, root: Path = RAY_LOGS) -> list[str]:
    """The last `limit` lines that contain one of `marks` in the Ray session's logs written since `since_unix`
    (older ones belong to an earlier policy's session), each with its file name."""
    hits: list[str] = []
    for path in sorted(root.rglob("*")) if root.exists() else []:
        try:
            if path.suffix not in RAY_LOG_SUFFIXES or path.stat().st_mtime < since_unix or path.stat().st_size > 50_000_000:
                continue
            with path.open(errors="replace") as lines:
                hits += [f"{path.name}: {line.rstrip()[:260]}" for line in lines if any(m in line for m in marks)]
        except OSError:
            continue
    return hits[-limit:]


class ServerProcess:
    """The config's server (`thinktier up`, or the peer) in its own process group (so that a stop reaches what it
    started), output to a log file."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._seen = 0
        with log_path.open("w") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def new_lines(self) -> list[str]:
        lines = self.log_lines()
        new, self._seen = lines[self._seen :], len(lines)
        return new

    def wait_ready(self, ready_url: str, timeout_s: float, mark: str | None = None) -> str | None:
        """None once GET `ready_url` answers 200 and, when given, the server has printed a line starting with `mark`;
        otherwise why not. New progress and error lines are printed."""
        deadline = time.monotonic() + timeout_s
        marked = mark is None
        while time.monotonic() < deadline:
            for line in self.new_lines():
                marked = marked or line.startswith(mark or "")
                if line.startswith("[") or any(m in line for m in UP_ERROR_MARKS):
                    print("    up| " + line[:240], flush=True)
            if self.process.poll() is not None:
                return f"the server exited with {self.process.returncode}"
            try:
                if marked and httpx.get(ready_url, timeout=5).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            time.sleep(2)
        return f"not ready after {timeout_s:.0f} s"

    def stop(self, wait_s: float, clock: Clock) -> None:
        """SIGINT to the group (the server stops Serve and Ray), then SIGKILL to whatever of the group is left."""
        try:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGINT)
                self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            clock.log(f"  the server did not stop in {wait_s:.0f} s; SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


def wait_gpus_empty(timeout_s: float, clock: Clock) -> None:
    """Wait until no process holds a GPU, then SIGKILL those left: on the lent machine they are all ours."""
    deadline = time.monotonic() + timeout_s
    while (pids := gpu_pids()) and time.monotonic() < deadline:
        time.sleep(2)
    for pid in pids:
        clock.log(f"  GPU process {pid} left after the stop; SIGKILL")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError as exc:
            clock.log(f"  kill {pid}: {exc}")
    if pids:
        time.sleep(3)
