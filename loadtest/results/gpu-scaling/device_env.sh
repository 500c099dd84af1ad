# Sourced at the start of each device call of issue 13 (nvidia-h200-x2), from the repository root, after the staging
# calls of ../../../../shared/gpu/README.md: vLLM, Ray and the project's dependencies in /tmp/site. Unpacks the commit
# under test (.snap/code.tar: `git archive HEAD` without results, tests and chart) to /tmp/snap and runs from there,
# so that the working tree's uncommitted files are never what is measured. Sets R (the repository root) and TT_READY.
R=$(pwd)
source "$R/.gpu/s/assemble.sh" > /dev/null
rm -rf /tmp/snap && mkdir -p /tmp/snap && tar -C /tmp/snap -xf "$R/.snap/code.tar"
cd /tmp/snap && X="$R/.ray" source "$R/.ray/s/stage_extra.sh"
