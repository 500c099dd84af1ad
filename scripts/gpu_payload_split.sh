#!/bin/bash
# Re-splits the vLLM payload of ../shared/gpu/build_payload.sh (.gpu/c1 and .gpu/c2) into three carries that each fit
# the device's 64 MiB per call beside this repository's working tree (~15 MB; c1 + the tree came to 74 MB otherwise).
# Then stage in three calls, each within 30 s of the last:
#   1. carry [.gpu/c1, .gpu/whl, .gpu/tok, .gpu/s]: bash .gpu/s/stage1.sh
#   2. carry [.gpu/c2, .gpu/s]:                     cp .gpu/c2/* /tmp/stage/
#   3. carry [.gpu/c3, .gpu/s]:                     cp .gpu/c3/* /tmp/stage/ && source .gpu/s/assemble.sh && YOUR COMMAND
set -eu
G=${1:-.gpu}
[ -f "$G/c2/vso.tar.xz.part-01" ] || { echo "nothing to split: $G/c2/vso.tar.xz.part-01 is missing (already split?)" >&2; exit 1; }
work=$(mktemp -d)
cat "$G/c1/vso.tar.xz.part-00" "$G/c2/vso.tar.xz.part-01" > "$work/vso.tar.xz"
(cd "$work" && sha256sum vso.tar.xz | cut -c1-64) | cmp -s - <(cut -c1-64 "$G/s/vso.sha256") || { echo "payload checksum differs" >&2; exit 1; }
rm "$G/c1/vso.tar.xz.part-00" "$G/c2/vso.tar.xz.part-01"
split -b 20000000 -d -a 2 "$work/vso.tar.xz" "$work/vso.tar.xz.part-"
mkdir -p "$G/c3"
mv "$work/vso.tar.xz.part-00" "$G/c1/"
mv "$work/vso.tar.xz.part-01" "$work/vso.tar.xz.part-02" "$G/c2/"
mv "$work"/vso.tar.xz.part-0[3-9] "$G/c3/"
(cd "$G/c1" && sha256sum vpy.tar.xz vso.tar.xz.part-00; cd ../c2 && sha256sum vso.tar.xz.part-*; cd ../c3 && sha256sum vso.tar.xz.part-*) > "$G/s/SHA256SUMS"
rm -r "$work"
echo "split into $G/c1, $G/c2, $G/c3"
