# The kueue-governor image: `kgov serve` for the Helm chart (helm/kueue-governor).
#   docker build -t kueue-governor:0.1.0 .
# Small (slim base, no compiler, no pip cache in the final stage), non-root (numeric UID, so
# runAsNonRoot can check it), and the root filesystem can be mounted read-only.
# The base is pinned to an exact Python and Debian release; pin its digest too in your registry
# mirror (--build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
RUN python -m venv /opt/kueue-governor && /opt/kueue-governor/bin/pip install . \
    && /opt/kueue-governor/bin/pip uninstall --yes pip setuptools wheel

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/kueue-governor/bin:$PATH
COPY --from=build /opt/kueue-governor /opt/kueue-governor
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["kgov"]
CMD ["serve", "--help"]
