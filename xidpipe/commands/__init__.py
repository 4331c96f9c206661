"""Sub-commands of the `xidpipe` CLI, one module each."""
