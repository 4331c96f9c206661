"""Questions to the incident history: list, show and count incidents."""
