"""The processes of one local launch: each process that the Ray of a `thinktier up` starts (GCS, raylet, agents, workers,
their vLLM engine cores, HAProxy) inherits the launch's id in its environment (MARKER_ENV), so that all of them can be
ended when it stops, orphans too, and also when the launcher itself is killed: a reaper process outlives it for that.

    python -m thinktier.cluster.reaper LAUNCH_ID     waits for the end of its stdin, then ends the launch's processes
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable

import psutil

MARKER_ENV = "THINKTIER_LAUNCH_ID"
STOP_GRACE_S = 5
"""How long the processes of a stopped launch get to end on their own, and then after SIGTERM, before SIGKILL."""


def launched_processes(launch_id: str) -> list[psutil.Process]:
    """The processes (this one aside) whose environment carries MARKER_ENV=launch_id."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):  # gone, a zombie, or another user's
            if process.environ().get(MARKER_ENV) == launch_id:
                found.append(process)
    return found


def end_launch(launch_id: str, progress: Callable[[str], None]) -> None:
    """Ends the processes of `launch_id`, waiting each time for STOP_GRACE_S at most: for them to end on their own (a
    stopped Ray's do, unless their parent was killed: ray.shutdown kills the raylet a second after asking it to stop,
    and a killed launcher stops nothing), then after SIGTERM, then after SIGKILL."""
    _, alive = psutil.wait_procs(launched_processes(launch_id), timeout=STOP_GRACE_S)
    if not alive:
        return
    progress(f"stopping {len(alive)} processes left running: {', '.join(sorted({p.name() for p in alive}))}")
    for end in (psutil.Process.terminate, psutil.Process.kill):
        for process in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                end(process)
        _, alive = psutil.wait_procs(alive, timeout=STOP_GRACE_S)
        if not alive:
            return


def start_reaper(launch_id: str) -> subprocess.Popen[bytes]:
    """A process that ends the processes of `launch_id` once this one closes the reaper's stdin or ends, however it ends
    (SIGKILL too: `buildah run`, stopped, kills its command so). In a session of its own, so that a Ctrl-C in this
    process's terminal leaves it to its work; without the marker, so that it does not end itself."""
    env = {name: value for name, value in os.environ.items() if name != MARKER_ENV}
    command = [sys.executable, "-m", "thinktier.cluster.reaper", launch_id]
    return subprocess.Popen(command, stdin=subprocess.PIPE, start_new_session=True, env=env)


def _say(line: str) -> None:
    """Prints where the launcher's output goes, if it still goes anywhere: with the launcher killed, its stdout may be a
    pipe nobody reads any more (`buildah run`'s), and the reaper's work must not end with a BrokenPipeError."""
    with contextlib.suppress(OSError):
        print(f"thinktier: {line}", flush=True)


def main() -> None:
    launch_id = sys.argv[1]
    sys.stdin.buffer.read()  # returns when the launcher closes the pipe or ends
    end_launch(launch_id, _say)


if __name__ == "__main__":
    main()
