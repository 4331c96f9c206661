# Test-only stand-in for postgres:17 (no registry here): Debian bookworm's PostgreSQL 15, set up
# from POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB on first start like the upstream image,
# data in /var/lib/postgresql/data, pg_isready on the PATH for the compose healthcheck.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o postgres -g postgres /var/lib/postgresql/data /var/run/postgresql
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
USER postgres
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
