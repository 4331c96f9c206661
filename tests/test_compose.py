"""docker-compose.yml and the Dockerfile refer to real things: every service running the xidpipe
image runs an `xidpipe` command that the real command line accepts, dependencies exist, and the
Kafka image is the broker line the tests run against. New services are checked as they appear."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from xidpipe.cli import build_parser
from xidpipe.localinfra.kafka import KAFKA_VERSION

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]


def _build_of(service: dict[str, Any]) -> tuple[Path, str] | None:
    """(context directory, Dockerfile name) of a service that builds an image, else None."""
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return ROOT / build, "Dockerfile"
    return ROOT / build.get("context", "."), build.get("dockerfile", "Dockerfile")


def _project_services() -> dict[str, dict[str, Any]]:
    """Services that build the project's image, and services that run an image one of those
    builds (e.g. `image: xidpipe:local` without `build`)."""
    built_images = {svc["image"] for svc in SERVICES.values() if _build_of(svc) and "image" in svc}
    return {
        name: svc
        for name, svc in SERVICES.items()
        if _build_of(svc) is not None or svc.get("image") in built_images
    }


def _dockerfile_instruction(instruction: str) -> list[str] | None:
    """The exec-form argument list of the last CMD or ENTRYPOINT in the project's Dockerfile."""
    found = None
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        match = re.match(rf"\s*{instruction}\s+(.*)$", line, re.IGNORECASE)
        if match:
            found = match.group(1).strip()
    if found is None:
        return None
    assert found.startswith("["), f"Dockerfile {instruction} must use the exec form: {found}"
    value = json.loads(found)
    assert isinstance(value, list) and all(isinstance(part, str) for part in value)
    return value


def _words(value: str | list[str] | None) -> list[str] | None:
    if value is None:
        return None
    return shlex.split(value) if isinstance(value, str) else [str(part) for part in value]


def _argv(service: dict[str, Any]) -> list[str]:
    """What the container runs: entrypoint + command, compose overriding the Dockerfile."""
    entrypoint = _words(service.get("entrypoint"))
    if entrypoint is None:
        entrypoint = _dockerfile_instruction("ENTRYPOINT") or []
    command = _words(service.get("command"))
    if command is None:
        command = _dockerfile_instruction("CMD") or []
    return [*entrypoint, *command]


def _assert_real_xidpipe_command(argv: list[str], where: str) -> None:
    assert argv, f"{where}: runs no command"
    assert argv[0] == "xidpipe", f"{where}: runs {argv[0]!r}, not the xidpipe entry point"
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit as exc:
        pytest.fail(f"{where}: `{shlex.join(argv)}` is not a valid xidpipe command (exit {exc.code})")
    assert callable(getattr(args, "func", None)), f"{where}: `{shlex.join(argv)}` selects no handler"


def test_some_service_runs_the_project_image() -> None:
    assert _project_services(), "docker-compose.yml has no service built from the Dockerfile"


@pytest.mark.parametrize("name", sorted(_project_services()))
def test_project_service_runs_a_real_xidpipe_command(name: str) -> None:
    service = SERVICES[name]
    assert "command" in service, f"service {name}: say which xidpipe command it runs"
    _assert_real_xidpipe_command(_argv(service), f"service {name}")


@pytest.mark.parametrize("name", sorted(n for n, s in SERVICES.items() if _build_of(s)))
def test_build_context_has_the_dockerfile(name: str) -> None:
    build = _build_of(SERVICES[name])
    assert build is not None
    context, dockerfile = build
    assert (context / dockerfile).is_file(), f"service {name}: no {dockerfile} in {context}"


def test_dockerfile_default_command_is_real() -> None:
    cmd = _dockerfile_instruction("CMD")
    assert cmd is not None, "the Dockerfile has no CMD"
    _assert_real_xidpipe_command([*(_dockerfile_instruction("ENTRYPOINT") or []), *cmd], "Dockerfile CMD")


def test_dockerfile_copies_every_package() -> None:
    """`pip install .` inside the image sees only what was copied: every package setuptools
    includes must be there."""
    text = (ROOT / "Dockerfile").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    include = re.search(r"include\s*=\s*\[([^\]]*)\]", pyproject)
    assert include is not None
    packages = [p.strip().strip('"').rstrip("*") for p in include.group(1).split(",") if p.strip()]
    for package in packages:
        assert re.search(rf"^COPY\s+{package}\s", text, re.MULTILINE), f"Dockerfile does not copy {package}/"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_dependencies_exist_and_are_health_checked(name: str) -> None:
    depends = SERVICES[name].get("depends_on") or {}
    items = depends.items() if isinstance(depends, dict) else ((dep, {}) for dep in depends)
    for dep, spec in items:
        assert dep in SERVICES, f"service {name} depends on unknown service {dep}"
        if (spec or {}).get("condition") == "service_healthy":
            assert "healthcheck" in SERVICES[dep], f"{name} waits for {dep} to be healthy; it has no healthcheck"


def test_kafka_image_is_the_tested_broker_line() -> None:
    kafka_images = [svc["image"] for svc in SERVICES.values() if svc.get("image", "").startswith("apache/kafka")]
    assert kafka_images, "no apache/kafka service"
    for image in kafka_images:
        tag = image.partition(":")[2]
        assert re.fullmatch(r"4\.0\.\d+", tag), f"{image}: the pipeline is tested against Kafka 4.0.x"
        # The same version `xidpipe dev kafka` runs from Maven Central jars.
        assert tag == KAFKA_VERSION, f"{image} differs from the local test broker {KAFKA_VERSION}"


def test_named_volumes_are_declared() -> None:
    declared = set(COMPOSE.get("volumes") or {})
    for name, service in SERVICES.items():
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            if source and not source.startswith((".", "/", "~")):
                assert source in declared, f"service {name} mounts undeclared volume {source}"


def test_package_files_named_in_commands_exist() -> None:
    """A path into the installed package (site-packages/xidpipe/...) names a file the package ships."""
    for name, service in _project_services().items():
        for word in _argv(service):
            if "/site-packages/xidpipe/" in word:
                shipped = ROOT / "xidpipe" / word.split("/site-packages/xidpipe/", 1)[1]
                assert shipped.is_file(), f"service {name}: {word} is not a file of the package"


# -- safe by default: nothing published beyond the loopback, no fixed password -------------------------


def _published(service: dict[str, Any]) -> list[str]:
    return [str(p) for p in service.get("ports") or []]


@pytest.mark.parametrize("name", sorted(n for n, s in SERVICES.items() if s.get("ports")))
def test_published_ports_bind_the_loopback_only(name: str) -> None:
    for port in _published(SERVICES[name]):
        assert port.startswith("127.0.0.1:") and port.count(":") == 2, (
            f"service {name} publishes {port!r} on every interface (Kafka is PLAINTEXT, identity off here)")


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


SECRETS_SERVICE = "secrets"


def _secrets_mount() -> tuple[str, str]:
    """(host directory, container directory) the secrets service writes to."""
    (volume,) = SERVICES[SECRETS_SERVICE]["volumes"]
    host, container = volume.split(":")[:2]
    return host, container


def test_no_service_holds_a_fixed_password() -> None:
    for name, service in SERVICES.items():
        for key, value in _environment(service).items():
            assert "PASSWORD" not in key or key.endswith("_FILE"), f"service {name}: {key} is a fixed password"
            assert not re.search(r"://[^/@:]+:[^/@]+@", value), f"service {name}: {key} carries a password"


def test_passwords_are_generated_at_the_first_start_into_a_git_ignored_directory() -> None:
    host, inside = _secrets_mount()
    assert host.startswith("./")
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert f"/{host[2:].rstrip('/')}/" in ignored, f"{host} is not git-ignored"
    secrets = SERVICES[SECRETS_SERVICE]
    argv = _argv(secrets)
    assert argv[1:4] == ["dev", "compose-secrets", inside], argv
    assert secrets.get("restart", "no") == "no"
    postgres = SERVICES["postgres"]
    env = _environment(postgres)
    assert env["POSTGRES_PASSWORD_FILE"].startswith(inside + "/")
    assert f"{host}:{inside}:ro" in postgres["volumes"]
    users = [n for n, s in SERVICES.items() if "XIDPIPE_DATABASE_URL" in _environment(s)]
    assert {"postgres", "worker", "respond", "web"} <= {*users, "postgres"}
    for name in [*users, "postgres"]:
        service = SERVICES[name]
        assert service["depends_on"][SECRETS_SERVICE] == {"condition": "service_completed_successfully"}, name
        if name != "postgres":
            assert _environment(service)["PGPASSFILE"].startswith(inside + "/"), name
            assert f"{host}:{inside}:ro" in service["volumes"], name


def test_the_secrets_command_writes_what_the_services_read(tmp_path: Path) -> None:
    from xidpipe.cli import main

    names = {Path(_environment(SERVICES["postgres"])["POSTGRES_PASSWORD_FILE"]).name,
             Path(_environment(SERVICES["worker"])["PGPASSFILE"]).name}
    target = tmp_path / "secrets"
    assert main(["dev", "compose-secrets", str(target)]) == 0
    assert {p.name for p in target.iterdir()} >= names
    password = (target / "postgres-password").read_text()
    assert len(password) >= 32 and password != "xidpipe"
    assert (target / "pgpass").read_text() == f"*:*:*:xidpipe:{password}\n"
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in target.iterdir())
    assert main(["dev", "compose-secrets", str(target)]) == 0  # a second start keeps them
    assert (target / "postgres-password").read_text() == password


def test_pgpass_goes_to_the_services_user(tmp_path: Path) -> None:
    import os

    from xidpipe.cli import main

    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root (the secrets service runs as root)")
    assert main(["dev", "compose-secrets", str(tmp_path), "--pgpass-owner", "10001:10001"]) == 0
    pgpass = (tmp_path / "pgpass").stat()
    assert (pgpass.st_uid, pgpass.st_gid, pgpass.st_mode & 0o777) == (10001, 10001, 0o600)
    assert (tmp_path / "postgres-password").stat().st_uid == 0
