#!/bin/bash
# Re-splits the vLLM payload of ../shared/gpu/build_payload.sh (or an earlier split of it) into carries that each fit
# the device's 64 MiB per call beside this repository's working tree (~34-41 MiB): c1 keeps only vLLM's Python part
# (stage1.sh also carries .gpu/whl and .gpu/tok), the CUDA extensions (~91 MiB) go in $PARTS equal parts (default 4,
# ~23 MiB each), one each in c2, c3, ... Then stage in 1 + $PARTS calls, each within 30 s of the last:
#   1. carry [.gpu/c1, .gpu/whl, .gpu/tok, .gpu/s]: bash .gpu/s/stage1.sh   (scripts/gpu_reasoner.sh train does it)
#   2. carry [.gpu/c2, .gpu/s]:                     cp .gpu/c2/* /tmp/stage/
#   ...                                             (the same for c3, c4)
#   5. carry [.gpu/c5, .gpu/s]:                     cp .gpu/c5/* /tmp/stage/ && source .gpu/s/assemble.sh && YOUR COMMAND
set -eu
G=${1:-.gpu}
PARTS=${PARTS:-4}
parts=$(ls "$G"/c[1-9]/vso.tar.xz.part-* 2>/dev/null | sort -t- -k2) || true
[ -n "$parts" ] || { echo "nothing to split: no $G/c*/vso.tar.xz.part-* (run ../shared/gpu/build_payload.sh first)" >&2; exit 1; }
work=$(mktemp -d)
# shellcheck disable=SC2086
cat $parts > "$work/vso.tar.xz"
(cd "$work" && sha256sum vso.tar.xz | cut -c1-64) | cmp -s - <(cut -c1-64 "$G/s/vso.sha256") || { echo "payload checksum differs" >&2; exit 1; }
# shellcheck disable=SC2086
rm $parts
(cd "$work" && split -n "$PARTS" -d -a 2 vso.tar.xz vso.tar.xz.part- && rm vso.tar.xz)
chunks=()
for i in $(seq 0 $((PARTS - 1))); do
  c="c$((i + 2))"
  mkdir -p "$G/$c" && mv "$work/vso.tar.xz.part-$(printf %02d "$i")" "$G/$c/" && chunks+=("$c")
done
(cd "$G/c1" && sha256sum vpy.tar.xz; for c in "${chunks[@]}"; do (cd "../$c" && sha256sum vso.tar.xz.part-*); done) \
  > "$G/s/SHA256SUMS"
rm -r "$work"
echo "split into $G/c1 (vLLM's Python part) and ${chunks[*]/#/$G/}"
