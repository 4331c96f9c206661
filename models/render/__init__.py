"""One document, rendered where it lands: Markdown (the dossier file, the outbox), Jira wiki markup
(Jira Server and Data Center, REST API v2) and the Atlassian Document Format (Jira Cloud, REST API v3).

`doc` holds the small document model the dossier is written in; each renderer escapes the
user-controlled text (pod names, kernel lines, reasons) for its own format.
"""
