"""xidpipe agents package."""
