"""Cluster actions with guardrails: cordon, taint, annotate, condition, Event, optional drain, release.

- `executor.CordonExecutor` is the entry point: it reads the node and the fleet, asks the pure
  decisions in `models.cordon`, runs the plan of steps the decision calls for (`steps`: the cordon
  or the repeat under its lock, then the condition, the Event, the drain, each a small class with
  its own port), and records every action in an `action_log.ActionStore` (SQL table `actions`, or a
  JSON Lines log when no database is configured).
- The cluster is reached through narrow ports (`port`, and each step's own), all implemented by
  `kube_nodes.KubeNodes` on the Kubernetes API, the only module here that imports the client
  (with its node cache, `node_cache`).
- Failures are `respond.errors.PermanentError` or `TemporaryError` (a redelivery may succeed).
- The Kubernetes client is synchronous; `CordonExecutor.handle_async` runs it in a thread
  (`asyncio.to_thread`) so callers on an event loop are never blocked.
- With no cluster configured every decision is recorded as a dry run.
"""
