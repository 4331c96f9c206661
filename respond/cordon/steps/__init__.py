"""The steps after the cordon decision, registered in the order they run (`base` says what a step is).

| step | trigger | phase | record | port |
|---|---|---|---|---|
| `cordon` | cordon | decision | the decision's (`cordon`) | `CordonWriter.apply_cordon` |
| `repeat` | repeat | decision | the decision's (`repeat`) | `RepeatWriter.annotate`, `event_series` |
| `condition` | cordon, resume | after | joins the decision's | `ConditionWriter.set_condition` |
| `event` | cordon, resume | after | joins the decision's | `EventWriter.emit_event` |
| `evict` (the drain, when `drain.enabled`) | cordon | after | its own | `PodPort.read_pod`, `node_pods`, `evict` |
| `quarantine` (`quarantine_gpu` rules) | quarantine | decision | the decision's | `QuarantineWriter` |
| `quarantine_condition` | quarantine, quarantine_resume | after | joins the decision's | `QuarantineConditionWriter` |
| `remediate` (when `remediation.enabled`) | cordon, resume | after | its own | `RemediationIntake.open_remediation` |

The `event` step runs on the quarantine's triggers too (an Event naming the GPU and its rule).

A new step is one module here (its port and its class) and one line in `STEPS`; the executor
(`respond.cordon.executor`) runs `plan(trigger, policy)`, and `xidpipe replay` lists it for each
decision, without naming any step.
"""

from __future__ import annotations

from models.cordon_policy import CordonPolicy
from respond.cordon.steps import condition, cordon, drain, event, quarantine, quarantine_condition, remediate, repeat
from respond.cordon.steps.base import NAME_MAX, RESERVED, RESUMES, Step, StepContext, StepRecord, Trigger, trigger_of

__all__ = ["STEPS", "Step", "StepContext", "StepRecord", "Trigger", "plan", "register", "trigger_of",
           "unregister"]

STEPS: list[Step] = [cordon.STEP, repeat.STEP, quarantine.STEP, condition.STEP, quarantine_condition.STEP, event.STEP,
                     drain.STEP, remediate.STEP]


def plan(trigger: Trigger, policy: CordonPolicy) -> list[Step]:
    """The steps that run on `trigger` under `policy`, in registration order."""
    return [s for s in STEPS if trigger in s.triggers and s.applies(policy)]


def register(step: Step) -> None:
    """Add a step after those registered. A step of phase `decision` writes a cordon, a repeat or a
    quarantine (a resume has no decision to write), and each of those has one."""
    if any(s.name == step.name for s in STEPS):
        raise ValueError(f"a step named {step.name!r} is registered already")
    if step.name in RESERVED or not 0 < len(step.name) <= NAME_MAX:
        raise ValueError(f"a step's name is its action kind: 1 to {NAME_MAX} characters, none of "
                         f"{', '.join(sorted(RESERVED))}; not {step.name!r}")
    if step.phase == "decision" and (RESUMES & step.triggers or any(
            s.phase == "decision" and s.triggers & step.triggers for s in STEPS)):
        raise ValueError(f"step {step.name!r}: a decision step writes a cordon, a repeat or a quarantine, one step "
                         "each")
    STEPS.append(step)


def unregister(name: str) -> None:
    STEPS[:] = [s for s in STEPS if s.name != name]
