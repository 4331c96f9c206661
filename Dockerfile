# The xidpipe image: the `xidpipe` command and its dependencies on Python 3.11.
#   docker build -t xidpipe:local .    (docker compose builds it as the `xidpipe` service)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /build
# Only what the package needs: no virtual environment, caches or test data in the image.
# (README.m[d]: copied when present; pyproject.toml names it as the long description.)
COPY pyproject.toml README.m[d] ./
COPY models ./models
COPY agents ./agents
COPY streams ./streams
COPY respond ./respond
COPY history ./history
COPY service ./service
COPY xidpipe ./xidpipe
RUN pip install . \
 && rm -rf /build \
 && useradd --system --create-home --home-dir /home/xidpipe --uid 10001 xidpipe

USER xidpipe
WORKDIR /home/xidpipe
ENTRYPOINT ["xidpipe"]
CMD ["demo"]
