"""The exit statuses of every `xidpipe` command, and the one error type commands raise to end with one.

    0  ok
    1  findings, from the two commands that look for them: `scan` found faults, `replay` found
       incidents. A command that lists or prints what it found (`parse`, `incidents list`, `stats`)
       exits 0: it answered.
    2  usage or input error: a bad flag or value, an unreadable input file, a setting left unset
    3  a dependency unavailable: the database, Kafka, the cluster, or the output stream
    4  refused by policy or by the cordon circuit breaker

`xidpipe.cli.main` turns a `CliError` (and the dependency errors it knows) into one line on stderr,
`xidpipe <command>: <message>`, and its status; never a traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_REFUSED = 4

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "ok",
    EXIT_FINDINGS: "findings (scan found faults, replay found incidents; a command that lists what it found exits 0)",
    EXIT_USAGE: "usage or input error",
    EXIT_UNAVAILABLE: "a dependency unavailable (database, Kafka, cluster, output)",
    EXIT_REFUSED: "refused by policy or by the circuit breaker",
}


class CliError(Exception):
    """Ends the command with `message` on stderr and exit status `code`."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class UsageError(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


class Unavailable(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_UNAVAILABLE)


class Refused(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_REFUSED)
