"""Return to service: what happens when a node xidpipe held goes back into scheduling, whoever returns
it (the remediation loop after validation passed, or `xidpipe node release`).

`return_to_service` lifts xidpipe's cordon (only its own: `CordonExecutor.release`), deletes xidpipe's
DeviceTaintRules of the incident's GPUs on the node (`respond.quarantine.release.release_quarantine`:
a GPU quarantined for the incident goes back with its node), and then calls every registered hook
with what was returned, so that what another feature holds for the node goes with the cordon. A hook
must be idempotent (a hook is called again when a crash came between the release and the hook) and
may raise `respond.errors.TemporaryError` to be called again at the loop's next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from respond.cordon.executor import ActionResult, CordonExecutor
from respond.quarantine.release import release_quarantine

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Returned:
    """A node returned to service: which, for which incident and GPU, by whom and why."""

    node: str
    incident_id: str | None
    gpu: str  # the GPU UUID of the incident ('' for a node-level fault)
    by: str
    reason: str


ReturnHook = Callable[[Returned], None]
RETURN_HOOKS: list[ReturnHook] = []


def on_return(hook: ReturnHook) -> ReturnHook:
    """Register `hook` (usable as a decorator): it is called for every node returned to service."""
    if hook not in RETURN_HOOKS:
        RETURN_HOOKS.append(hook)
    return hook


def remove_return_hook(hook: ReturnHook) -> None:
    RETURN_HOOKS[:] = [h for h in RETURN_HOOKS if h is not hook]


def run_return_hooks(returned: Returned) -> None:
    """Every registered hook, in registration order; the first failure is raised after the others ran."""
    errors: list[Exception] = []
    for hook in list(RETURN_HOOKS):
        try:
            hook(returned)
        except Exception as exc:
            log.warning("return-to-service hook %s failed for %s: %s", getattr(hook, "__name__", hook), returned.node,
                        exc, extra={"node": returned.node, "incident": returned.incident_id})
            errors.append(exc)
    if errors:
        raise errors[0]


def return_to_service(executor: CordonExecutor, node: str, *, by: str, reason: str, incident_id: str | None = None,
                      gpu: str = "", condition_reason: str = "ReleasedByOperator") -> ActionResult:
    """Lift xidpipe's cordon of `node`, then, when it was lifted (a dry run or a refusal does neither),
    release the incident's GPU quarantines on the node and run the return hooks."""
    result = executor.release(node, by=by, reason=reason, incident_id=incident_id, condition_reason=condition_reason)
    if result.outcome == "done" and not result.dry_run:
        rules = release_quarantine(executor, by=by, reason=reason, node=node, incident_id=result.incident_id)
        if rules is not None and rules.outcome not in ("done", "noop"):
            log.warning("return to service of %s: its GPU quarantine was not released: %s", node, rules.reason,
                        extra={"node": node, "incident": result.incident_id})
        run_return_hooks(Returned(node=node, incident_id=result.incident_id, gpu=gpu, by=by, reason=reason))
    return result
