"""xidpipe streams package."""
