"""The pure domain of xidpipe: records, the Xid/SXid catalog, parsing, grouping and decisions.

Nothing in this package performs I/O beyond reading its own bundled data files, and nothing in it
imports the agent, stream or integration layers (enforced by import-linter in `make test`).
"""
