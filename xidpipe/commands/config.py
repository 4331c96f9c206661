"""`xidpipe config show`: the effective settings of each service and where each came from.

Values come from the flags, the environment, the config file or the defaults (`service.config`);
secrets are masked: `SecretStr` fields, credentials in URLs, and anything `models.redact` finds.
The reference table of every setting in docs/configuration.md is `reference_markdown()`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import socket
from typing import Any

from xidpipe.commands.exits import EXIT_OK
from xidpipe.commands.options import database_parent

# Each command's one settings class (the deployables', and the command line's own); a class's sections
# (`RespondSettings.actions`, `.sinks`) are shown after it, each under its own name.
SERVICES: dict[str, str] = {
    "agent": "agents.settings:AgentSettings",
    "worker": "streams.settings:WorkerSettings",
    "respond": "respond.settings:RespondSettings",
    "serve": "xidpipe.commands.serve_settings:ServeSettings",
    "cli": "xidpipe.commands.cli_settings:CliSettings",
    "kafka": "xidpipe.commands.kafka_settings:KafkaAdminSettings",
}
MASK = "**********"  # as pydantic shows a SecretStr
_SECRET_KEY = re.compile(r"(?i)(token|passw|secret|api[_-]?key|routing[_-]?key|credential|webhook)")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "config", help="show the effective settings", description="Configuration of the xidpipe services.")
    csub = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    show = csub.add_parser(
        "show", parents=[database_parent()], help="print the effective settings and where each came from",
        description="Print each setting of the service(s) with its value and its source: flag, env (the "
        "variable named), file (--config or $XIDPIPE_CONFIG) or default. Secrets are masked.")
    show.add_argument("--service", choices=tuple(SERVICES), help="one command's settings (default: all)")
    show.add_argument("--format", choices=("yaml", "json"), default="yaml", help="output format (default yaml)")
    show.set_defaults(func=run_show)


def top_classes(service: str | None = None) -> list[type[Any]]:
    """The settings class of `service`, or of every command."""
    out = []
    for name in [SERVICES[service]] if service else SERVICES.values():
        module, cls = name.split(":")
        out.append(getattr(importlib.import_module(module), cls))
    return out


def classes(service: str | None = None) -> list[type[Any]]:
    """Every settings class of `service` (or of every command): each command's, then its sections'."""
    from service.config import sections

    return list(dict.fromkeys(c for top in top_classes(service) for c in (top, *sections(top).values())))


def mask(value: Any, key: str = "") -> Any:
    """`value` as it may be shown: secret-named entries masked, credentials in text redacted."""
    from models.redact import redact

    if isinstance(value, dict):
        return {k: mask(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask(v, key) for v in value]
    if isinstance(value, str):
        if value and _SECRET_KEY.search(key):
            return MASK
        return redact(value)
    return value


def effective(service: str | None, flags: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per settings section (agent, worker, respond, actions, sinks, web): key → value, source, env."""
    from service.config import config_file, env_name, file_values, sections, setting_key, settings_fields, source_of
    from xidpipe.commands.startup import load

    file = file_values(config_file())
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for top in top_classes(service):
        given = {k: v for k, v in flags.items() if k in settings_fields(top) and v is not None}
        settings = load(top, **given)  # loaded once, with its sections
        parts = [(top, settings, given), *((cls, getattr(settings, name), {}) for name, cls in sections(top).items())]
        for cls, part, part_flags in parts:
            dumped = part.model_dump(mode="json")
            section = out.setdefault(cls.service, {})
            for name in settings_fields(cls):
                section[setting_key(cls, name)] = {
                    "value": mask(_shown(getattr(part, name), dumped.get(name), name), name),
                    "source": source_of(cls, name, part_flags, file), "env": env_name(cls, name)}
    return out


def _shown(value: Any, dumped: Any, name: str) -> Any:
    """What `mask` is given: a secret URL (`database_url`, a SecretStr that may carry a password) as the
    URL, which `mask` shows with its credentials redacted; any other secret as pydantic masked it."""
    from pydantic import SecretStr

    if isinstance(value, SecretStr) and not _SECRET_KEY.search(name):
        return value.get_secret_value()
    return dumped


def _yaml_scalar(value: Any) -> str:
    import yaml

    text: str = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def render_yaml(data: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = ["# effective settings; the comment says where each came from (flag, env, file, default)"]
    for section, items in data.items():
        lines.append(f"{section}:")
        for key, item in items.items():
            where = item["source"] + (f" {item['env']}" if item["source"] == "env" else "")
            lines.append(f"  {key}: {_yaml_scalar(item['value'])}  # {where}")
    return "\n".join(lines) + "\n"


def run_show(args: argparse.Namespace) -> int:
    data = effective(args.service, {"database_url": args.database_url})
    if args.format == "json":
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        print(render_yaml(data), end="")
    return EXIT_OK


def _default_text(info: Any) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if info.default_factory is not None:
        if info.default_factory is socket.gethostname:
            return "the host name"
        value = info.default_factory()
        if isinstance(value, BaseModel):
            return "see below"
        if not isinstance(value, list | tuple | dict):  # a value of the machine or process (pod name, pid)
            return "computed at start"
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "none"
    if isinstance(value, str | int | float | bool) or value.__class__.__name__.endswith("Path"):
        return f"`{value}`" if str(value) != "" else '`""`'
    return f"`{json.dumps(value, default=str)}`"


def _row(key: str, env: str, default: str, description: str | None) -> str:
    meaning = (description or "").replace("|", "\\|").replace("\n", " ")
    return f"| `{key}` | `{env}` | {default} | {meaning} |"


def reference_markdown() -> str:
    """The tables of every setting of every service, as docs/configuration.md shows them: the shared
    settings first (with the services that read each), then each service's own."""
    from service.config import SHARED_KEYS, env_name, setting_key, settings_fields

    header = "| Key (file) | Environment | Default | Meaning |\n|---|---|---|---|\n"
    found: dict[str, list[tuple[str, str, str | None]]] = {}
    own: list[str] = []
    for cls in classes():
        rows = []
        for name in settings_fields(cls):
            info = cls.model_fields[name]
            key = setting_key(cls, name)
            if key in SHARED_KEYS:
                found.setdefault(key, []).append((cls.service, _default_text(info), info.description))
            else:
                rows.append(_row(key, env_name(cls, name), _default_text(info), info.description))
        if rows:  # a class of shared settings only (the command line's) is in the shared table alone
            own.append(f"#### {cls.service} (`{cls.__module__}.{cls.__name__}`)\n\n{header}" + "\n".join(rows))
    shared = []
    for key in SHARED_KEYS:
        uses = found.get(key, [])
        if not uses:
            continue
        first = uses[0][1]
        other = [f"{svc}: {d}" for svc, d, _ in uses if d != first]
        default = first + (f" ({'; '.join(other)})" if other else "")
        readers = ", ".join(dict.fromkeys(svc for svc, _, _ in uses))
        shared.append(_row(key, f"XIDPIPE_{key.upper()}", default, f"{uses[0][2]} (read by: {readers})"))
    return f"#### shared\n\n{header}" + "\n".join(shared) + "\n\n" + "\n\n".join(own) + "\n"


def env_names() -> dict[str, str]:
    """Every environment name a service reads, with the section (service) it configures."""
    from service.config import env_name, settings_fields

    return {env_name(cls, name): cls.service for cls in classes() for name in settings_fields(cls)}
