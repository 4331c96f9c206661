# Test-only stand-in for apache/kafka:4.0.2 (no registry here): the same broker version from the
# Maven Central jars `xidpipe dev kafka fetch` caches (copied into the build context as lib/), on a
# Debian JRE; configured, like the upstream image, from the KAFKA_* environment and CLUSTER_ID.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --home-dir /opt/kafka appuser \
 && install -d -o 1000 -g 1000 /var/lib/kafka/data /opt/kafka/config
COPY lib /opt/kafka/libs
COPY kafka-entrypoint.sh /opt/kafka/entrypoint.sh
USER 1000
ENTRYPOINT ["/opt/kafka/entrypoint.sh"]
