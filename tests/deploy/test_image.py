"""The xidpipe image as `make image` builds it: what each deployable needs is in it, run as the
image's own user, and what none of them needs is not (issue #17)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from tests.deploy.image import podman, run_in_image

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "xidpipe" / "samples" / "cluster"


def _version_of_checkout() -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert match is not None
    return match.group(1)


def test_the_entrypoint_is_xidpipe_of_this_checkout(xidpipe_image: str) -> None:
    done = run_in_image(xidpipe_image, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["xidpipe", _version_of_checkout()]
    explicit = run_in_image(xidpipe_image, "xidpipe", "--version", entrypoint="")
    assert explicit.returncode == 0 and explicit.stdout == done.stdout, explicit.stderr


def test_the_agents_tools_run(xidpipe_image: str) -> None:
    journalctl = run_in_image(xidpipe_image, "journalctl", "--version", entrypoint="")
    assert journalctl.returncode == 0, journalctl.stderr
    # the journald source's documented floor (docs/agent.md): systemd 242 or later.
    assert int(re.match(r"systemd (\d+)", journalctl.stdout).group(1)) >= 242  # type: ignore[union-attr]
    lspci = run_in_image(xidpipe_image, "lspci", "--version", entrypoint="")
    assert lspci.returncode == 0 and lspci.stdout.startswith("lspci version"), lspci.stderr
    # lspci names devices from its database: without pci.ids the evidence would show only numbers.
    ids = run_in_image(xidpipe_image, "-c", "grep '^10de ' /usr/share/misc/pci.ids", entrypoint="sh")
    assert ids.returncode == 0 and "NVIDIA" in ids.stdout, ids.stdout + ids.stderr


def test_the_user_is_numeric_and_not_root(xidpipe_image: str) -> None:
    config = json.loads(podman("image", "inspect", "--format", "{{json .Config}}", xidpipe_image).stdout)
    user = config["User"]
    assert re.fullmatch(r"\d+:\d+", user), f"USER {user!r}: the kubelet checks runAsNonRoot only on a numeric uid"
    assert int(user.split(":")[0]) != 0 and int(user.split(":")[1]) != 0
    ident = run_in_image(xidpipe_image, "-u", entrypoint="id")
    assert ident.returncode == 0 and ident.stdout.strip() == user.split(":")[0], ident.stderr


def test_the_services_directories_are_the_users(xidpipe_image: str) -> None:
    """docker-compose.yml mounts named volumes on these: a new volume takes the directory's owner."""
    dirs = ["/home/xidpipe", "/home/xidpipe/outbox", "/home/xidpipe/faust", "/home/xidpipe/agent", "/home/xidpipe/var"]
    done = run_in_image(xidpipe_image, "-c", "%u:%g", *dirs, entrypoint="stat")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["10001:10001"] * len(dirs)
    # Indeed writable by the process, as the demo and `serve` write under the working directory.
    probe = run_in_image(xidpipe_image, "-c", "touch var/probe outbox/probe && pwd", entrypoint="sh")
    assert probe.returncode == 0 and probe.stdout.strip() == "/home/xidpipe", probe.stderr


def _shipped_samples() -> list[str]:
    """The sample files the package ships: those its package-data patterns name."""
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    prefix = "samples/cluster/"
    return sorted({str(p.relative_to(SAMPLES)) for pattern in package_data["xidpipe"] if pattern.startswith(prefix)
                   for p in SAMPLES.glob(pattern.removeprefix(prefix)) if p.is_file()})


def test_the_demos_sample_files_are_in_the_image(xidpipe_image: str) -> None:
    expected = _shipped_samples()
    assert "state.jsonl" in expected and any(p.startswith("evidence/") for p in expected)
    code = ("from xidpipe.demo import sample_dir; root = sample_dir(); "
            "print('\\n'.join(sorted(str(p.relative_to(root)) for p in root.rglob('*') if p.is_file())))")
    done = run_in_image(xidpipe_image, "-c", code, entrypoint="python")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == expected
    # The web pages' templates, and the demo's scan path over the samples, work in the image.
    scan = run_in_image(xidpipe_image, "demo", "--scan-only")
    assert scan.returncode == 0 and "gpu-node-03" in scan.stdout, scan.stdout[-2000:] + scan.stderr[-2000:]
    code = ("import importlib.resources as r; root = r.files('xidpipe').joinpath('web', 'templates'); "
            "print(sum(p.name.endswith('.html') for p in root.iterdir()))")
    templates = run_in_image(xidpipe_image, "-c", code, entrypoint="python")
    shipped = len(list((REPO / "xidpipe" / "web" / "templates").glob("*.html")))
    assert templates.returncode == 0 and int(templates.stdout) == shipped > 0, templates.stderr


def test_nothing_the_deployables_do_not_need(xidpipe_image: str) -> None:
    for tool in ("gcc", "cc", "g++", "make", "pip", "pip3"):
        found = run_in_image(xidpipe_image, "-c", f"command -v {tool}", entrypoint="sh")
        assert found.returncode != 0, f"{tool} in the image at {found.stdout.strip()}"
    leftovers = run_in_image(
        xidpipe_image, "-c",
        "ls -d /root/.cache/pip /home/xidpipe/.cache/pip /build /opt/xidpipe/lib/python3.11/site-packages/pip "
        "/opt/xidpipe/lib/python3.11/site-packages/tests /var/lib/apt/lists/*_Packages "
        "/usr/share/doc/python3/changelog.Debian.gz 2>/dev/null; true", entrypoint="sh")
    assert leftovers.stdout.split() == [], f"in the image: {leftovers.stdout.split()}"
    size = int(podman("image", "inspect", "--format", "{{.Size}}", xidpipe_image).stdout)
    assert size < 600_000_000, f"the image grew to {size / 1e6:.0f} MB"
