"""The passwords of the local docker-compose stack, made at its first start (`xidpipe dev compose-secrets`,
run by its `secrets` service) into the git-ignored `secrets/` directory, and kept there for the next.

- `postgres-password`: the PostgreSQL superuser's password, which the postgres image reads from
  `POSTGRES_PASSWORD_FILE` (as root, at its first start, when it makes the cluster);
- `pgpass`: the same password for libpq (`PGPASSFILE`), which the xidpipe services use to connect:
  their database URL names no password.

Both are mode 0600 (libpq ignores a password file others can read); `pgpass` belongs to `owner` (the
image's user, 10001) when given, which needs root, as the `secrets` service runs.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

PASSWORD_FILE = "postgres-password"
PGPASS_FILE = "pgpass"
DATABASE_USER = "xidpipe"


def _write(path: Path, text: str, owner: tuple[int, int] | None) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    if owner is not None:
        os.chown(tmp, *owner)
    tmp.replace(path)


def ensure_compose_secrets(directory: Path, owner: tuple[int, int] | None = None) -> tuple[Path, bool]:
    """Make `directory`'s password files unless they exist; (directory, whether a password was made)."""
    directory.mkdir(parents=True, exist_ok=True)
    password_file = directory / PASSWORD_FILE
    made = not password_file.exists()
    if made:
        _write(password_file, secrets.token_urlsafe(32), None)
    password = password_file.read_text(encoding="utf-8").strip()
    if not password:
        raise ValueError(f"{password_file} is empty: remove it (and the postgres volume) to start afresh")
    pgpass = directory / PGPASS_FILE
    line = f"*:*:*:{DATABASE_USER}:{password}\n"
    if made or not pgpass.exists() or pgpass.read_text(encoding="utf-8") != line:
        _write(pgpass, line, owner)
    return directory, made
