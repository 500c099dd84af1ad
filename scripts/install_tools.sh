#!/usr/bin/env bash
# Installs the system tools the tests use that pip cannot provide: promtool and prometheus (Debian's `prometheus`
# package), which check the chart's alert rules and scrape a running thinktier. apt-get runs only when a tool is
# missing and this runs as root on a Debian-like system; otherwise it says how to install them and goes on (the tests
# that need a missing tool fail with the same command).
set -euo pipefail

missing=""
for tool in promtool prometheus; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
if [ -z "$missing" ]; then exit 0; fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install_tools.sh: installing Debian's prometheus package (for$missing) ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends prometheus >/dev/null
else
    echo "install_tools.sh: missing$missing; install them with: sudo apt-get install -y --no-install-recommends prometheus" >&2
fi
