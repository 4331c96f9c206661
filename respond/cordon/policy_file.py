"""Read a cordon policy file (YAML) and validate it; errors name the file and the field."""

from __future__ import annotations

from pathlib import Path

import yaml

from models.cordon_policy import CordonPolicy, PolicyError, policy_from_mapping


def load_policy_text(text: str, source: str = "<policy>") -> CordonPolicy:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {exc}") from None
    return policy_from_mapping(data, source)


def load_policy(path: Path | str | None) -> CordonPolicy:
    """The policy in `path`, or the documented defaults when no file is given."""
    if path is None:
        return CordonPolicy()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{p}: cannot read policy file: {exc.strerror or exc}") from None
    return load_policy_text(text, str(p))
