"""The xidpipe container image for the tests, built once per session with podman (``make image``).

Fixtures
--------
``xidpipe_image`` (session, ``str``)
    The name of the image built from this checkout (``xidpipe:dev``). ``make image`` runs first; it
    returns at once when the image's ``io.xidpipe.source-hash`` label already matches the sources
    (``deploy/image/build.sh --print-hash``). The tests run podman with ``CONTAINERS_CONF`` set to
    ``deploy/image/containers.conf`` (``podman_env()``), which this plugin exports for the session.

A test that uses the fixture gets the ``image`` marker, so ``-m "not image"`` deselects it. Without
podman (or root to install it) the tests are skipped with the reason, except under ``CI=true``, where
they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.services import _timings, in_ci, service_unavailable

REPO = Path(__file__).resolve().parents[2]
BUILD_SH = REPO / "deploy" / "image" / "build.sh"
CONTAINERS_CONF = REPO / "deploy" / "image" / "containers.conf"
IMAGE = "xidpipe:dev"
IMAGE_FIXTURES = frozenset({"xidpipe_image"})
BUILD_TIMEOUT_S = 1200  # a cold build here takes about 2 minutes; shared CPUs are slower


def podman_env() -> dict[str, str]:
    """The environment to run podman (and podman-compose) with on this kind of machine."""
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF") or str(CONTAINERS_CONF)}


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`podman ARGS` with the project's containers.conf; output captured as text."""
    done = subprocess.run(["podman", *args], env=podman_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout[-2000:]}"
                             f"{done.stderr[-2000:]}")
    return done


def run_in_image(image: str, *argv: str, entrypoint: str | None = None, timeout: float = 120
                 ) -> subprocess.CompletedProcess[str]:
    """`podman run --rm IMAGE ARGV` (``entrypoint`` overrides the image's `xidpipe`); not checked."""
    override = ["--entrypoint", entrypoint] if entrypoint is not None else []
    return podman("run", "--rm", *override, image, *argv, timeout=timeout, check=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if set(getattr(item, "fixturenames", ())) & IMAGE_FIXTURES:
            item.add_marker(pytest.mark.image)


@pytest.fixture(scope="session")
def xidpipe_image() -> str:
    if shutil.which("podman") is None and os.geteuid() != 0:
        service_unavailable("podman", "not installed, and not root to install it (make image)")
    if shutil.which("make") is None:
        service_unavailable("podman image", "no `make` to run `make image`")
    started = time.monotonic()
    try:
        done = subprocess.run(["make", "-s", "image"], cwd=REPO, env=podman_env(), capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        service_unavailable("podman image", f"`make image` took over {BUILD_TIMEOUT_S} s")
    if done.returncode != 0:
        reason = f"`make image` exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        if in_ci() or shutil.which("podman") is not None:
            pytest.fail(reason, pytrace=False)  # podman is here: a build that fails is a failure
        service_unavailable("podman image", reason)
    lines = done.stdout.strip().splitlines()
    _timings["image"] = f"{IMAGE}: {lines[-1] if lines else 'built'} ({time.monotonic() - started:.0f} s)"
    return IMAGE
