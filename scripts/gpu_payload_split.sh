#!/bin/bash
# Re-splits the vLLM payload of ../shared/gpu/build_payload.sh (or an earlier split of it) into four carries that each
# fit the device's 64 MiB per call beside this repository's working tree (~31 MiB): c1 keeps only vLLM's Python part
# (stage1.sh also carries .gpu/whl and .gpu/tok), the CUDA extensions (~91 MiB) go in three equal parts, one each in
# c2, c3 and c4. Then stage in four calls, each within 30 s of the last:
#   1. carry [.gpu/c1, .gpu/whl, .gpu/tok, .gpu/s]: bash .gpu/s/stage1.sh   (scripts/gpu_reasoner.sh train does it)
#   2. carry [.gpu/c2, .gpu/s]:                     cp .gpu/c2/* /tmp/stage/
#   3. carry [.gpu/c3, .gpu/s]:                     cp .gpu/c3/* /tmp/stage/
#   4. carry [.gpu/c4, .gpu/s]:                     cp .gpu/c4/* /tmp/stage/ && source .gpu/s/assemble.sh && YOUR COMMAND
set -eu
G=${1:-.gpu}
parts=$(ls "$G"/c[1-9]/vso.tar.xz.part-* 2>/dev/null | sort -t- -k2) || true
[ -n "$parts" ] || { echo "nothing to split: no $G/c*/vso.tar.xz.part-* (run ../shared/gpu/build_payload.sh first)" >&2; exit 1; }
work=$(mktemp -d)
# shellcheck disable=SC2086
cat $parts > "$work/vso.tar.xz"
(cd "$work" && sha256sum vso.tar.xz | cut -c1-64) | cmp -s - <(cut -c1-64 "$G/s/vso.sha256") || { echo "payload checksum differs" >&2; exit 1; }
# shellcheck disable=SC2086
rm $parts
(cd "$work" && split -n 3 -d -a 2 vso.tar.xz vso.tar.xz.part- && rm vso.tar.xz)
mkdir -p "$G/c2" "$G/c3" "$G/c4"
mv "$work/vso.tar.xz.part-00" "$G/c2/"
mv "$work/vso.tar.xz.part-01" "$G/c3/"
mv "$work/vso.tar.xz.part-02" "$G/c4/"
(cd "$G/c1" && sha256sum vpy.tar.xz; for c in c2 c3 c4; do (cd "../$c" && sha256sum vso.tar.xz.part-*); done) > "$G/s/SHA256SUMS"
rm -r "$work"
echo "split into $G/c1 (vLLM's Python part), $G/c2, $G/c3 and $G/c4"
