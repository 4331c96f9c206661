# The xidpipe image: every deployable (agent, worker, respond, serve, demo) from one image whose
# entrypoint is `xidpipe`, on Debian bookworm's own Python 3.11.
#   make image                                   # builds xidpipe:dev here, with podman and a local base
#   docker build -t xidpipe:dev .                # with a registry: the official debian:bookworm-slim
#   docker build --build-arg BASE=my.registry/debian:bookworm-slim -t xidpipe:dev .
# BASE must be Debian bookworm (the virtual environment links to its /usr/bin/python3.11).
ARG BASE=debian:bookworm-slim

# --- build: a virtual environment in /opt/xidpipe; nothing of this stage but the venv is kept ------
FROM ${BASE} AS build
# Where PyPI sits behind a TLS-inspecting proxy: the CA bundle pip trusts, a file mounted into this
# stage only (deploy/image/build.sh mounts the host's); it does not reach the image.
ARG PIP_CERT
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null \
 && python3 -m venv /opt/xidpipe
WORKDIR /build
# The dependencies first, in a layer of their own: a change to the sources does not re-download them.
COPY pyproject.toml README.md ./
RUN for p in models agents streams respond history service xidpipe; do mkdir -p $p && touch $p/__init__.py; done \
 && /opt/xidpipe/bin/pip install -q . \
 && /opt/xidpipe/bin/pip uninstall -q -y xidpipe
COPY models ./models
COPY agents ./agents
COPY streams ./streams
COPY respond ./respond
COPY history ./history
COPY service ./service
COPY xidpipe ./xidpipe
RUN rm -rf build ./*.egg-info \
 && /opt/xidpipe/bin/pip install -q --no-deps . \
 && /opt/xidpipe/bin/pip uninstall -q -y pip setuptools \
 && find /opt/xidpipe -name __pycache__ -prune -exec rm -rf {} + \
 && /opt/xidpipe/bin/python -m compileall -q /opt/xidpipe/lib

# --- runtime ------------------------------------------------------------------------------------
FROM ${BASE}
# python3: the interpreter the venv links to. systemd: journalctl, the agent's journald source.
# pciutils: lspci for the agent's evidence (its PCI database, pci.ids, comes with it).
# procps, util-linux: ps, kill and setpriv for an operator in the container.
# nvidia-smi and libnvidia-ml.so.1 come from the host's driver (the NVIDIA container toolkit, or a
# hostPath of the driver's bin and lib; deploy/helm/xidpipe/README.md).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 systemd pciutils procps ca-certificates tzdata >/dev/null \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && groupadd --gid 10001 xidpipe \
 && useradd --uid 10001 --gid 10001 --home-dir /home/xidpipe --create-home --shell /usr/sbin/nologin xidpipe \
 && install -d -o 10001 -g 10001 -m 0750 /home/xidpipe/outbox /home/xidpipe/faust /home/xidpipe/agent \
      /home/xidpipe/var
COPY --from=build /opt/xidpipe /opt/xidpipe

ENV PATH=/opt/xidpipe/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/home/xidpipe
ARG XIDPIPE_SOURCE_HASH=unknown
LABEL org.opencontainers.image.title="xidpipe" \
      org.opencontainers.image.description="GPU fault incident pipeline: node agent, stream worker, responder, web" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.xidpipe.source-hash="${XIDPIPE_SOURCE_HASH}"

# Numeric, so that the kubelet can check runAsNonRoot without a passwd lookup.
USER 10001:10001
WORKDIR /home/xidpipe
ENTRYPOINT ["xidpipe"]
CMD ["demo"]
