"""Options shared by many commands, defined once on parent parsers and accepted on either side of the
action: `xidpipe --database-url X silence list`, `xidpipe silence --database-url X list` and
`xidpipe silence list --database-url X` mean the same.

argparse lets a sub-command's defaults overwrite what an outer level parsed, so every shared option
is declared with no default (`argparse.SUPPRESS`) at each level and its default is filled in once,
after parsing (`fill_defaults`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from history.database import DEFAULT_DB
from xidpipe.commands.output import enum_arg

SHARED_DEFAULTS: dict[str, Any] = {
    "database_url": None, "json": False, "output": None, "action_log": None, "kubeconfig": None, "context": None,
    "in_cluster": False, "dry_run": None, "policy_file": None, "config": None,
}


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)


def database_parent(default: str = f"$XIDPIPE_DATABASE_URL, else {DEFAULT_DB}, what `make demo` wrote"
                    ) -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--database-url", metavar="URL", help=f"SQLAlchemy URL of the database (default: {default})")
    return p


def config_parent() -> argparse.ArgumentParser:
    """`--config FILE`: the settings file, before the command (`xidpipe --config F worker`) or after it
    (`xidpipe replay DIR --config F`)."""
    from pathlib import Path

    p = _parent()
    p.add_argument("--config", metavar="FILE", type=Path,
                   help="YAML file of settings (default: $XIDPIPE_CONFIG); the environment overrides it, flags "
                   "override both (docs/configuration.md)")
    return p


def json_parent() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


OUTPUTS = ("table", "wide", "json", "yaml")


def output_parent() -> argparse.ArgumentParser:
    """`-o table|wide|json|yaml` (kubectl's flag) and `--json`, which is `-o json`."""
    p = _parent()
    p.add_argument("-o", "--output", type=enum_arg("output format", OUTPUTS), metavar="FORMAT",
                   help="table (default: fits the terminal), wide (more columns, nothing cut), json or yaml")
    p.add_argument("--json", action="store_true", help="print JSON instead of text (as -o json)")
    return p


def output_format(args: argparse.Namespace) -> str:
    """The output a command was asked for: `--json` is `-o json`; default `table`."""
    return "json" if getattr(args, "json", False) else (getattr(args, "output", None) or "table")


def history_parents() -> list[argparse.ArgumentParser]:
    """`--database-url`, `-o` and `--json`: the options of every command that reads the incident history."""
    return [database_parent(), output_parent()]


def node_name(text: str) -> str:
    """argparse `type=` for a node name (`models.node_names`): anything else is refused with the reason."""
    from models.node_names import node_name_problem

    problem = node_name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def add_enum(p: Any, flag: str, name: str, choices: Sequence[str], help: str, **kw: Any) -> None:
    """A filter over a closed set: a near miss is refused with "did you mean"; the shell completes the set."""
    action = p.add_argument(flag, type=enum_arg(name, choices), metavar=name.upper().replace(" ", "_"),
                            help=f"{help} ({', '.join(choices)})", **kw)
    action.completer = lambda **_: list(choices)


def suppress_defaults(parser: argparse.ArgumentParser) -> None:
    """Give every shared option of every (sub-)parser no default, so an inner level never undoes an outer one."""
    for action in parser._actions:
        if action.dest in SHARED_DEFAULTS:
            action.default = argparse.SUPPRESS
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                suppress_defaults(sub)


def fill_defaults(args: argparse.Namespace) -> argparse.Namespace:
    for key, value in SHARED_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, value)
    return args
