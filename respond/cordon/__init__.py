"""Cluster actions with guardrails: cordon, taint, annotate, condition, Event, optional drain, release.

- `executor.CordonExecutor` is the entry point: it reads the node and the fleet, asks the pure
  decisions in `models.cordon`, acts through `k8s.KubeNodes`, and records every action in an
  `store.ActionStore` (SQL table `actions`, or a JSON Lines log when no database is configured).
- The Kubernetes client is synchronous; `CordonExecutor.handle_async` runs it in a thread
  (`asyncio.to_thread`) so callers on an event loop are never blocked.
- With no cluster configured every decision is recorded as a dry run.
"""
