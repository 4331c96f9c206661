"""xidpipe xidpipe package."""
