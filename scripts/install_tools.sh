#!/usr/bin/env bash
# Installs the system tools the tests use that pip cannot provide, each from its Debian package: promtool and prometheus
# (`prometheus`), which check the chart's alert rules and scrape a running thinktier; buildah and mmdebstrap, which
# build the CPU image (scripts/build_image_cpu.sh) that the image test serves from. apt-get runs only when a tool is
# missing and this runs as root on a Debian-like system; otherwise it says how to install them and goes on (the tests
# that need a missing tool fail with the same command).
set -euo pipefail

declare -A package=([promtool]=prometheus [prometheus]=prometheus [buildah]=buildah [mmdebstrap]=mmdebstrap)
missing="" packages=""
for tool in promtool prometheus buildah mmdebstrap; do
    if ! command -v "$tool" >/dev/null; then
        missing="$missing $tool"
        case " $packages " in *" ${package[$tool]} "*) ;; *) packages="$packages ${package[$tool]}" ;; esac
    fi
done
if [ -z "$missing" ]; then exit 0; fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install_tools.sh: installing Debian's$packages (for$missing) ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $packages >/dev/null
else
    echo "install_tools.sh: missing$missing; install them with: sudo apt-get install -y --no-install-recommends$packages" >&2
fi
