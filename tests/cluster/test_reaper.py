"""The reaper of a local launch: when the launcher ends, however it ends (here SIGKILL, with its output going nowhere, as
`buildah run` leaves its command when it is stopped), every process that carries the launch's id goes, one that ignores
SIGTERM too, and no other process does."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import psutil

from thinktier.cluster.reaper import MARKER_ENV, STOP_GRACE_S, launched_processes

LAUNCHER = """
import os, subprocess, sys
from thinktier.cluster.reaper import MARKER_ENV, start_reaper
launch_id = sys.argv[1]
reaper = start_reaper(launch_id)
env = os.environ | {MARKER_ENV: launch_id}
sleeper = subprocess.Popen(["sleep", "600"], env=env, start_new_session=True)  # like a Ray worker, in a group of its own
stubborn = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); "
     "time.sleep(600)"], env=env, stdout=subprocess.PIPE)
stubborn.stdout.readline()  # it ignores SIGTERM from here on
print(reaper.pid, sleeper.pid, stubborn.pid, flush=True)
sys.stdin.read()
"""


def test_a_killed_launcher_leaves_no_process_of_its_launch_and_ends_no_other() -> None:
    launch_id = uuid.uuid4().hex
    other = subprocess.Popen(["sleep", "600"])  # not of the launch
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, launch_id], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
    try:
        reaper, *launched = (psutil.Process(int(pid)) for pid in launcher.stdout.readline().split())
        assert all(process.environ().get(MARKER_ENV) == launch_id for process in launched)
        assert MARKER_ENV not in reaper.environ()
        launcher.stdout.close()  # as `buildah run` goes: what the reaper says then goes nowhere (EPIPE)
        launcher.send_signal(signal.SIGKILL)
        started = time.monotonic()
        gone, alive = psutil.wait_procs([reaper, *launched], timeout=3 * STOP_GRACE_S + 10)
        assert alive == [] and len(gone) == 3
        assert time.monotonic() - started < 2 * STOP_GRACE_S + 5, "SIGTERM, then SIGKILL for the one that ignores it"
        assert other.poll() is None
    finally:
        for process in [*launched_processes(launch_id), other, launcher]:
            process.kill()
        launcher.wait()
        other.wait()
