"""What every long-running xidpipe service shares, below the deployables: the settings sources,
the logging setup, and the health and metrics endpoint. No domain logic and no SQL."""
