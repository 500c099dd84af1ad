# The dependencies image's install, run by scripts/build_image_cpu.sh as root inside the new Debian root filesystem,
# with the wheels in /tmp/build/wheels and the data scripts in /tmp/build/src/scripts. thinktier is installed for its
# dependencies, its data and the model it builds, then uninstalled: its own wheel is the next image's.
set -eu
export PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/build/wheels PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export THINKTIER_CACHE=/opt/thinktier/cache THINKTIER_DATA_DIR=/opt/thinktier/data VLLM_TARGET_DEVICE=cpu
python3 -m venv /opt/thinktier/venv
venv=/opt/thinktier/venv/bin
"$venv/pip" install --quiet "thinktier[cpu,models]"
# pip drags CUDA builds of these in beside CPU torch; they fail to load, so they go.
"$venv/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
cd /tmp/build/src && bash scripts/install_data.sh "$venv/python"
cd / && "$venv/python" -c "from thinktier.deployments.tier.models import resolve_model; resolve_model('builtin:smollm2-135m-think')"
"$venv/pip" uninstall --quiet -y thinktier
useradd --uid 1000 --gid 100 --create-home --shell /bin/bash ray
