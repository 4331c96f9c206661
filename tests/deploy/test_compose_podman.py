"""docker-compose.yml under podman: `podman-compose run --rm demo` with the xidpipe services from the
local image gives the demo's incidents, the same ones `xidpipe replay` finds in the sample cluster.

No registry is reachable here, so tests/deploy/compose.podman.yaml replaces the kafka and postgres
images with local builds (tests/deploy/compose/). Podman runs healthchecks from systemd timers, which
these machines lack, so podman-compose does not wait on `service_healthy`: the test runs kafka's own
healthcheck (`podman healthcheck run`) until it passes, then runs the demo without its dependencies.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.image import podman, podman_env
from tests.services import service_unavailable
from xidpipe.localinfra.kafka import KAFKA_VERSION, cache_dir, jars_complete

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OVERRIDE = HERE / "compose.podman.yaml"
BASE = "localhost/xidpipe-base:bookworm"  # what `make image` imports (deploy/image/build.sh)
STAND_INS = {  # image -> (Dockerfile, files of its build context)
    f"localhost/xidpipe-test-kafka:{KAFKA_VERSION}": ("kafka.Dockerfile", ["kafka-entrypoint.sh"]),
    "localhost/xidpipe-test-postgres:15": ("postgres.Dockerfile", ["postgres-entrypoint.sh"]),
}
HEAD = re.compile(r"^\[\d+\] (\S+)  (\S+)  (\S+)  x(\d+)  (.*)$", re.MULTILINE)


def _compose_cmd() -> list[str]:
    tool = Path(sys.executable).parent / "podman-compose"
    if not tool.exists():
        service_unavailable("podman-compose", f"{tool} missing: pip install -e '.[dev]'")
    return [str(tool)]


def _build_stand_ins() -> None:
    lib = cache_dir() / "lib"
    if not jars_complete(lib):
        service_unavailable("Kafka jars", "run `xidpipe dev kafka fetch`")
    for image, (dockerfile, files) in STAND_INS.items():
        if podman("image", "exists", image, check=False).returncode == 0:
            continue
        with tempfile.TemporaryDirectory() as ctx:
            for name in [dockerfile, *files]:
                shutil.copy2(HERE / "compose" / name, Path(ctx) / name)
            if "kafka" in image:
                shutil.copytree(lib, Path(ctx) / "lib")
            podman("build", "--pull=never", "--build-arg", f"BASE={BASE}", "-f", f"{ctx}/{dockerfile}",
                   "-t", image, ctx, timeout=900)


@pytest.fixture
def compose_project(xidpipe_image: str) -> Iterator[list[str]]:
    """The podman-compose command line of a fresh project; everything it made is removed after."""
    _build_stand_ins()
    project = f"xidpipe-test-{uuid.uuid4().hex[:6]}"
    base = [*_compose_cmd(), "-p", project, "--profile", "demo", "-f", str(REPO / "docker-compose.yml"),
            "-f", str(OVERRIDE)]
    try:
        yield base
    finally:
        subprocess.run([*base, "down", "-v", "-t", "5"], env=podman_env(), capture_output=True, timeout=180,
                       check=False)


def _wait_healthy(container: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        check = podman("healthcheck", "run", container, check=False)
        if check.returncode == 0:
            return
        if time.monotonic() > deadline:
            logs = podman("logs", "--tail", "40", container, check=False)
            pytest.fail(f"{container} not healthy in {timeout:.0f} s: {check.stdout}{check.stderr}\n"
                        f"{logs.stdout[-3000:]}{logs.stderr[-3000:]}")
        time.sleep(2)


def _expected_heads() -> list[tuple[str, str, str, int, tuple[str, ...]]]:
    """What `xidpipe replay` of the sample cluster finds, as the demo prints each incident's head."""
    from xidpipe.demo import sample_dir
    from xidpipe.replay import run_replay

    return sorted((i["node"], i["family"], i["classification"].upper(), int(i["count"]), tuple(sorted(i["codes"])))
                  for i in run_replay(sample_dir()).incidents if not i.get("merged_into"))


def test_compose_demo_under_podman_prints_the_demos_incidents(compose_project: list[str]) -> None:
    env = podman_env()
    up = subprocess.run([*compose_project, "up", "-d", "kafka"], env=env, capture_output=True, text=True,
                        timeout=300, check=False)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    kafka = podman("ps", "--filter", f"label=io.podman.compose.project={compose_project[2]}",
                   "--filter", "label=com.docker.compose.service=kafka", "--format", "{{.Names}}").stdout.split()
    assert len(kafka) == 1, kafka
    _wait_healthy(kafka[0], timeout=180)
    demo = subprocess.run([*compose_project, "run", "--rm", "--no-deps", "demo"], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    out = demo.stdout
    assert demo.returncode == 0, out[-4000:] + demo.stderr[-4000:]
    assert "Kafka: kafka:19092 (XIDPIPE_DEMO_KAFKA)" in out  # the compose broker, not one of its own
    heads = sorted((node, family, category, int(count), tuple(sorted(codes.split(", "))))
                   for node, family, category, count, codes in HEAD.findall(out))
    expected = _expected_heads()
    assert expected and f"\n{len(expected)} incidents:\n" in out
    assert heads == expected, out[-4000:]
    # the decision as its ticket states it (models.account): no cluster, so the gpu_lost cordon is a dry run
    assert re.search(r"^  gpu-node-03: Not cordoned \(dry run\): ", out, re.MULTILINE), out[-3000:]
