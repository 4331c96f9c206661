"""Alembic environment for every table of xidpipe's database (`history.schema.metadata`: the stream
pipeline, incident history and GPU ledger, sink and action record tables).

Its version table is `xidpipe_streams_version` (the name it has had since the first revision), so
other applications can keep their own migration history in the same database.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from history.migrate import VERSION_TABLE
from history.schema import POSTGRESQL_ONLY_INDEXES, metadata


def run() -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as conn:
            _migrate(conn)
    finally:
        engine.dispose()


def _migrate(connection: sa.Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE,
                      render_as_batch=connection.dialect.name == "sqlite", compare_type=True,
                      include_name=_ours)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()


def _ours(name: str | None, type_: str, _parent: object) -> bool:
    """Autogenerate looks at xidpipe's tables only: the database may hold other applications' tables.
    The PostgreSQL-only indexes the migrations make outside the metadata are not differences."""
    if type_ == "index":
        return name not in POSTGRESQL_ONLY_INDEXES
    return type_ != "table" or name in metadata.tables


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run them against a database")
run()
