# The image's install, run by scripts/build_image_cpu.sh as root in a container of the dependencies image, with
# thinktier's wheel in /tmp/build (no index: every dependency is installed already).
set -eu
venv=/opt/thinktier/venv/bin
"$venv/pip" install --quiet --no-deps --no-index --no-cache-dir --disable-pip-version-check /tmp/build/thinktier-*.whl
# The model again, should this thinktier build it otherwise (BUILD_VERSION; a no-op when not); then, as the image's
# user, that it resolves without a rebuild (the cache is root's) and that thinktier runs.
"$venv/python" -c "from thinktier.deployments.tier.models import resolve_model; print(resolve_model('builtin:smollm2-135m-think'))"
as_ray="setpriv --reuid=1000 --regid=100 --clear-groups env HOME=/home/ray"
$as_ray "$venv/python" -c "from thinktier.deployments.tier.models import resolve_model; resolve_model('builtin:smollm2-135m-think')"
$as_ray "$venv/thinktier" --help > /dev/null
rm -rf /tmp/build /root/.cache
