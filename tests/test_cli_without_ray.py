"""The command line starts without Ray: the GPU machine's benches (`thinktier bench gpu run`, `bench economy`,
`bench reasoner`) run where only vLLM is staged, and a module-level Ray import anywhere under the parser stops them
before they start (it cost a device call on 2026-12-05)."""

from __future__ import annotations

import subprocess
import sys

BLOCK_RAY = "import sys; sys.modules['ray'] = None\n"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_RAY + code], capture_output=True, text=True, timeout=120)


def test_the_parser_and_the_gpu_benches_import_without_ray() -> None:
    result = _run(
        "from thinktier.cli.main import build_parser\n"
        "args = build_parser().parse_args(['bench', 'gpu', 'table', 'run.json'])\n"
        "import thinktier.loadtest.bench.gpu.gpu_bench, thinktier.loadtest.bench.economy_bench\n"
        "import thinktier.loadtest.bench.reasoner.run\n"
        "print(args.func.__module__)\n"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "thinktier.cli" in result.stdout


def test_the_block_stops_what_does_need_ray() -> None:
    """The check above can fail: with Ray blocked, the module that starts a cluster does not import."""
    result = _run("import thinktier.cluster.local\n")
    assert result.returncode != 0 and "ray" in result.stderr
