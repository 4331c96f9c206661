"""The remediation policy: what happens to a node after xidpipe cordoned it (the policy file's
`remediation` section, validated with the rest of `models.cordon_policy.CordonPolicy`).

- `ladder`: which NVIDIA action asks for which first step (a GPU reset, a node reboot), which faults
  are never reset or rebooted (a driver fault goes to the driver/kernel matrix), when a card goes to
  RMA, and what follows a failure (a failed reset: one reboot; a failed validation after a reboot: RMA).
- `budgets`: attempts per node and per card within a window, reserved before a Job is created; the
  remediations in flight per pool are capped by the breaker's pool share.
- `drain`, `evidence`, `execution` (Jobs or a hand-off), `validation`, `jobs` (images and commands).
- `dry_run` (on by default): every step decided and recorded, nothing done.

Pure: the defaults below are the documented ones (docs/remediation.md); a policy file only needs
the keys it changes. Unknown keys are refused.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from models.vocabulary import Family, ImmediateAction, RecoveryAction, RemediationAction

Remedy = Literal["reset_gpu", "reboot_node"]
Executor = Literal["job", "hand_off"]
DrainMode = Literal["none", "gpu", "node"]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Trigger(_Strict):
    """What asks for a step: NVIDIA's immediate actions (the Xid catalog), the driver's latest GPU
    recovery action (Xid 154, NVML), fault families, Xids. Any listed value matches (OR)."""

    immediate_actions: tuple[ImmediateAction, ...] = ()
    recovery_actions: tuple[RecoveryAction, ...] = ()
    families: tuple[Family, ...] = ()
    xids: tuple[int, ...] = ()


class Ladder(_Strict):
    """The remediation ladder. The driver's latest recovery action is read first (it is what the
    driver asks for now), then the catalog's immediate action, then the family."""

    reset_gpu: Trigger = Field(
        default_factory=lambda: Trigger(
            immediate_actions=(ImmediateAction.RESET_GPU, ImmediateAction.WORKFLOW_XID_48),
            recovery_actions=(RecoveryAction.GPU_RESET, RecoveryAction.DRAIN_AND_RESET, RecoveryAction.BUS_RESET)),
        description="faults whose first step is a GPU reset (NVIDIA: RESET_GPU, Xid 48's workflow; recovery "
        "action GPU_RESET, DRAIN_AND_RESET, BUS_RESET)")
    reboot_node: Trigger = Field(
        default_factory=lambda: Trigger(
            immediate_actions=(ImmediateAction.RESTART_BM, ImmediateAction.RESTART_VM),
            recovery_actions=(RecoveryAction.NODE_REBOOT, RecoveryAction.SYSTEM_REBOOT),
            families=(Family.GPU_LOST,)),
        description="faults whose first step is a node reboot (NVIDIA: RESTART_BM, RESTART_VM; recovery action "
        "NODE_REBOOT, SYSTEM_REBOOT; a GPU fallen off the bus)")
    manual: Trigger = Field(
        default_factory=lambda: Trigger(
            immediate_actions=(ImmediateAction.UPDATE_SWFW,), families=(Family.DRIVER,),
            recovery_actions=(RecoveryAction.DRAIN_P2P, RecoveryAction.RECOVER_IMEX_DOMAIN)),
        description="faults never reset or rebooted by xidpipe: a driver fault points at the driver/kernel "
        "matrix (guide section 16), a firmware update, a fabric (P2P, IMEX) recovery; the node stays cordoned")
    rma_now: Trigger = Field(
        default_factory=lambda: Trigger(xids=(64,)),
        description="faults that are RMA at once (Xid 64: row remapping failed, the card has no spare rows)")
    rma_after: int = Field(
        default=2, ge=1, description="the same fault family on the same card after this many remediations within "
        "`rma_window_s` is RMA ('replace on repeat', guide section 10, step 9)")
    rma_window_s: float = Field(default=30 * 86400.0, gt=0, description="the RMA window (30 days)")
    after_failed_reset: Literal["reboot_node", "none"] = Field(
        default="reboot_node", description="a GPU reset that failed (or whose validation failed) is followed by "
        "one node reboot")
    after_failed_validation: Literal["rma", "none"] = Field(
        default="rma", description="validation that fails after a reboot: the card is RMA (none: people decide)")
    max_reboots: int = Field(default=1, ge=0, description="reboots within one loop")
    max_resets: int = Field(default=1, ge=0, description="GPU resets within one loop")


class Window(_Strict):
    attempts: int = Field(ge=0, description="reset, reboot and hand-off attempts allowed within the window")
    window_s: float = Field(gt=0, description="the window, in seconds")


class Budgets(_Strict):
    """Attempts are reserved (an `remediation_attempts` row) before their Job is created, so a
    crash never spends one twice and two responders never pass a limit together."""

    per_node: Window = Field(default_factory=lambda: Window(attempts=3, window_s=86400.0),
                             description="per node: 3 a day (a node that keeps needing reboots needs people)")
    per_card: Window = Field(default_factory=lambda: Window(attempts=2, window_s=7 * 86400.0),
                             description="per card (serial, else UUID): 2 a week")
    max_in_flight: int = Field(
        default=20, ge=1, description="remediations past the queue at once across the cluster")
    max_pool_share: float | None = Field(
        default=None, gt=0, le=1, description="remediations past the queue at once per pool, as a share of its "
        "nodes (at least `breaker.min_nodes`); None: the breaker's share (`breaker.max_pool_share`)")


class RemediationDrain(_Strict):
    """Before a reset or a reboot: evict through the Eviction API (PodDisruptionBudgets honoured)."""

    reset_gpu: DrainMode = Field(default="gpu", description="before a GPU reset: the pods on the faulty GPU "
                                 "(those the incident names, else the node's pods requesting nvidia.com/gpu)")
    reboot_node: DrainMode = Field(default="node", description="before a reboot: every pod but DaemonSet and "
                                   "mirror pods")
    deadline_s: float = Field(default=600.0, gt=0, description="how long evictions a budget refuses are retried")
    past_deadline: Literal["hold", "proceed"] = Field(
        default="hold", description="past the deadline: hold (the loop waits, reported stuck past its deadline; "
        "a budget is never bypassed) or proceed (reset or reboot with the blocked pods still running)")
    grace_period_s: int | None = Field(default=None, ge=0, description="pod grace period (None: the pod's own)")


class Evidence(_Strict):
    """Nothing is reset or rebooted before the incident's evidence is stored."""

    require_node_capture: bool = Field(
        default=True, description="wait for the agent's capture of the fault (nvidia-smi -q, the kernel log, "
        "lspci) to be stored")
    wait_s: float = Field(default=600.0, gt=0, description="how long to wait for it; past it the loop goes to "
                          "people (manual), since a reset would destroy what was not captured")
    bug_report: bool = Field(default=False, description="run nvidia-bug-report.sh on the node (a Job) and attach "
                             "its summary before any reset")


class Execution(_Strict):
    """Who carries out a step: a Job on the node, or a hand-off to the site's own tooling (an
    annotation it watches, and a webhook when `webhook_url` is set)."""

    reset_gpu: Executor = "job"
    reboot_node: Executor = "job"
    webhook_url: str | None = Field(default=None, description="POSTed a JSON request per hand-off (its key makes "
                                    "a repeat idempotent)")
    reset_deadline_s: float = Field(default=600.0, gt=0, description="a reset not confirmed by then failed")
    reboot_deadline_s: float = Field(default=1800.0, gt=0, description="a reboot whose node has not come back "
                                     "with a new boot ID and Ready by then failed")


class Validation(_Strict):
    """DCGM diagnostics on the node before it returns: pass and no new fault since the remediation
    started returns it; anything else keeps it out and the ladder goes on."""

    enabled: bool = True
    level: int = Field(default=2, ge=1, le=4, description="`dcgmi diag -r <level>` (2: medium, about 2 minutes)")
    deadline_s: float = Field(default=1800.0, gt=0, description="a validation Job not finished by then failed")


class JobTemplate(_Strict):
    """One Job kind: its image, its command (placeholders `{gpu}` the GPU UUID, `{pci}`, `{node}`,
    `{level}`, `{key}`), the extra annotations of its pod and how much of the host it needs."""

    image: str = Field(min_length=1)
    command: tuple[str, ...] = Field(min_length=1)
    privileged: bool = True
    host_pid: bool = False
    host_root: bool = Field(default=False, description="mount the node's / at /host")
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    runtime_class: str | None = None

    @field_validator("command")
    @classmethod
    def _known_placeholders(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for part in value:
            try:
                part.format(gpu="", pci="", node="", level="", key="")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"command part {part!r}: unknown placeholder {exc} (known: gpu, pci, node, level, "
                                 "key; write literal braces as {{ }})") from None
        return value


_SH = "/bin/sh"
RESET_SCRIPT = "chroot /host nvidia-smi --gpu-reset -i {gpu}"
REBOOT_SCRIPT = "nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl reboot"
BUG_REPORT_SCRIPT = (
    "mkdir -p /host/var/log/xidpipe && chroot /host nvidia-bug-report.sh --output-file "
    "/var/log/xidpipe/nvidia-bug-report-{key}.log && f=/host/var/log/xidpipe/nvidia-bug-report-{key}.log.gz && "
    "printf '{{\"path\":\"%s\",\"bytes\":%s,\"sha256\":\"%s\"}}' \"${{f#/host}}\" \"$(stat -c %s \"$f\")\" "
    "\"$(sha256sum \"$f\" | cut -d' ' -f1)\" > /dev/termination-log")
VALIDATE_SCRIPT = (
    "nv-hostengine >/dev/null 2>&1; out=$(dcgmi diag -r {level} -j); rc=$?; "
    "printf '%s' \"$out\" | gzip -c | base64 -w0 > /dev/termination-log; printf '%s\\n' \"$out\"; exit $rc")


class Jobs(_Strict):
    """The Jobs xidpipe creates, one per step, pinned to the node (tolerating xidpipe's taint and the
    cordon), named after their idempotency key, run by a ServiceAccount without API rights."""

    reset_gpu: JobTemplate = Field(default_factory=lambda: JobTemplate(
        image="docker.io/library/busybox:1.37.0", command=(_SH, "-c", RESET_SCRIPT), host_root=True))
    reboot_node: JobTemplate = Field(default_factory=lambda: JobTemplate(
        image="docker.io/library/busybox:1.37.0", command=(_SH, "-c", REBOOT_SCRIPT), host_pid=True))
    bug_report: JobTemplate = Field(default_factory=lambda: JobTemplate(
        image="docker.io/library/busybox:1.37.0", command=(_SH, "-c", BUG_REPORT_SCRIPT), host_root=True))
    validation: JobTemplate = Field(default_factory=lambda: JobTemplate(
        image="nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04", command=(_SH, "-c", VALIDATE_SCRIPT),
        runtime_class="nvidia"))
    ttl_after_finished_s: int = Field(default=7 * 86400, ge=0, description="finished Jobs are kept this long "
                                      "(their pods' status is the record of what ran)")


class RemediationPolicy(_Strict):
    enabled: bool = Field(default=False, description="open a remediation loop after each xidpipe cordon")
    dry_run: bool = Field(default=True, description="decide and record every step, change nothing (the default: "
                          "a site turns remediation on after reading what it would have done)")
    deadline_s: float = Field(default=4 * 3600.0, gt=0, description="a loop not finished by then is stuck "
                              "(metric xidpipe_responder_remediation_overdue, alert XidpipeRemediationStuck)")
    ladder: Ladder = Field(default_factory=Ladder)
    budgets: Budgets = Field(default_factory=Budgets)
    drain: RemediationDrain = Field(default_factory=RemediationDrain)
    evidence: Evidence = Field(default_factory=Evidence)
    execution: Execution = Field(default_factory=Execution)
    validation: Validation = Field(default_factory=Validation)
    jobs: Jobs = Field(default_factory=Jobs)

    def executor_of(self, action: RemediationAction | str) -> Executor:
        return self.execution.reset_gpu if action == RemediationAction.RESET_GPU else self.execution.reboot_node
