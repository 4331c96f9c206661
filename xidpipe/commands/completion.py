"""`xidpipe completion bash|zsh|fish`: the shell completion script (argcomplete), to source or install.

    source <(xidpipe completion bash)              # this shell
    xidpipe completion bash > /etc/bash_completion.d/xidpipe
    xidpipe completion zsh > "${fpath[1]}/_xidpipe"

The script calls `xidpipe` back to ask for the words that fit: commands, flags and the values of
the closed sets (components, lifecycle states, silence labels).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "completion", help="print the shell completion script (bash, zsh, fish, ...)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=SHELLS, help="the shell to complete for")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["xidpipe"], shell=args.shell))
    return 0
