"""`xidpipe serve`: the HTTP API (JSON under /api/v1/, OpenAPI 3.1) and the server-rendered pages
over the incident history, on one aiohttp server. SQL runs in worker threads, never on the loop."""
