"""Alembic migrations of the stream pipeline's tables (a package, so wheels carry them)."""
