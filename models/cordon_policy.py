"""The cordon policy: when a GPU fault takes a node out of scheduling, where, and how far it may go.

A policy is a YAML file validated by `CordonPolicy` (pydantic v2, unknown keys rejected) and
loaded once when a worker starts (`respond.cordon.policy_file.load_policy` reads the file; this
module stays pure). Every default below is the documented default; a policy file
only needs the keys it changes. See `docs/configuration.md` and `deploy/policy.example.yaml`.

- `rules`: ordered; the first rule whose `match` fits the incident decides (`cordon_now`,
  `cordon_after` N occurrences within a window, `quarantine_gpu`: the faulty GPU alone, with a DRA
  DeviceTaintRule of the rule's `effect`, at once or after N occurrences within a window; or
  `never`). No rule matching means `default_action`.
- `scope`: which nodes automatic cordons may touch (node labels: pools, GPU models, a selector)
  and the per-node opt-out label.
- `breaker`: the circuit breaker that stops a fleet-wide fault (a driver bug, a rack) from
  cordoning the fleet, or quarantining its GPUs (a pool's share is counted in nodes and in GPUs).
- `quarantine`: how a GPU is found among the DRA devices (`models.quarantine`).
- `drain`: optional eviction of the pods that use the faulty GPU (off by default).
- `remediation`: what follows the cordon: the remediation ladder, budgets, validation
  (`models.remediation_policy`; off by default, and a dry run when turned on).
- `dry_run`: decide and record, change nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from models.remediation_policy import RemediationPolicy
from models.vocabulary import FAMILIES, VERDICTS, Category, Family, ImmediateAction, values

RuleAction = Literal["cordon_now", "cordon_after", "quarantine_gpu", "never"]
# A DeviceTaintRule's effect (resource.k8s.io/v1): NoSchedule keeps new claims off the GPU, NoExecute
# also evicts the pods holding it, None disturbs nothing (its status reports what NoExecute would evict).
TaintEffect = Literal["NoSchedule", "NoExecute", "None"]
# The actions with a threshold (occurrences within a window): required for one, optional for the other.
_THRESHOLD_REQUIRED = frozenset({"cordon_after"})
_THRESHOLD_ALLOWED = frozenset({"cordon_after", "quarantine_gpu"})
# What a rule's match may name, and how a name outside it is called in the error (the categories are
# the classification's verdicts: a fleet incident is never cordoned).
_MATCHABLE = (("families", FAMILIES, "fault family"), ("categories", VERDICTS, "category"),
              ("immediate_actions", values(ImmediateAction), "NVIDIA immediate action"))


def _unknown(given: Any, known: tuple[str, ...]) -> list[str]:
    """The names of a list as given that are not `known` (any other shape is left to the field's type)."""
    return [v for v in given if isinstance(v, str) and v not in known] if isinstance(given, list | tuple) else []


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and the offending field."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Match(_Strict):
    """What an incident must show for a rule to apply. Every field given must match (AND); within a
    field any listed value matches (OR). An empty match matches every incident."""

    families: tuple[Family, ...] = Field(default=(), description=f"fault families, from: {', '.join(FAMILIES)}")
    xids: tuple[int, ...] = Field(default=(), description="Xid codes; matches when the incident carries any of them")
    categories: tuple[Category, ...] = Field(
        default=(), description=f"the incident's category (after the stream's classification): {', '.join(VERDICTS)}"
    )
    immediate_actions: tuple[ImmediateAction, ...] = Field(
        default=(), description="NVIDIA's immediate action from the Xid catalog (RESET_GPU, RESTART_BM, ...)"
    )

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, data: Any) -> Any:
        """A name outside the vocabulary is refused with the names known."""
        for key, known, what in _MATCHABLE if isinstance(data, dict) else ():
            unknown = _unknown(data.get(key), known)
            if unknown:
                raise ValueError(f"unknown {what} {unknown}; known: {', '.join(known)}")
        return data

    @model_validator(mode="after")
    def _xids_in_range(self) -> Match:
        bad = [x for x in self.xids if not 1 <= x <= 1023]
        if bad:
            raise ValueError(f"Xid codes must be between 1 and 1023, got {bad}")
        return self


class Rule(_Strict):
    name: str = Field(min_length=1, max_length=63, description="shown in every decision's reason")
    match: Match = Field(default_factory=Match)
    action: RuleAction
    occurrences: int | None = Field(
        default=None, ge=1, description="cordon_after (and quarantine_gpu, optional): occurrences of the incident "
        "needed within `window_s`",
    )
    window_s: float | None = Field(default=None, gt=0, description="the window of `occurrences`, in seconds")
    effect: TaintEffect | None = Field(
        default=None, description="quarantine_gpu: the DeviceTaintRule's effect (default NoSchedule; NoExecute "
        "evicts the pods holding the GPU; None disturbs nothing)",
    )

    @model_validator(mode="after")
    def _threshold_only_where_it_applies(self) -> Rule:
        given = (self.occurrences is not None, self.window_s is not None)
        if self.action in _THRESHOLD_REQUIRED and not all(given):
            raise ValueError(f"action {self.action} needs both occurrences and window_s")
        if self.action not in _THRESHOLD_ALLOWED and any(given):
            raise ValueError(f"occurrences and window_s only apply to cordon_after and quarantine_gpu, "
                             f"not {self.action}")
        if any(given) and not all(given):
            raise ValueError(f"action {self.action}: give both occurrences and window_s, or neither (at once)")
        if self.effect is not None and self.action != "quarantine_gpu":
            raise ValueError(f"effect only applies to quarantine_gpu, not {self.action}")
        return self

    @property
    def quarantines(self) -> bool:
        """The rule takes the faulty GPU out, not its node (the node is cordoned when it cannot)."""
        return self.action == "quarantine_gpu"

    @property
    def taint_effect(self) -> TaintEffect:
        return self.effect or "NoSchedule"


def _default_rules() -> tuple[Rule, ...]:
    hour, day = 3600.0, 24 * 3600.0
    return (
        Rule(name="gpu-lost", match=Match(families=(Family.GPU_LOST,)), action="cordon_now"),
        # NVIDIA's WORKFLOW_XID_48: solo RESET_GPU, with Xid 63/64 DRAIN_AND_RESET; the guide escalates a
        # double-bit error at once (section 九).
        Rule(name="double-bit-error", match=Match(xids=(48,)), action="cordon_now"),
        Rule(name="uncontained-ecc", match=Match(xids=(95,)), action="cordon_now"),
        Rule(name="row-remap-failure", match=Match(xids=(64,)), action="cordon_now"),
        Rule(name="nvidia-reset-or-reboot",
             match=Match(immediate_actions=(ImmediateAction.RESET_GPU, ImmediateAction.RESTART_BM)),
             action="cordon_now"),
        Rule(name="suspected-hardware", match=Match(categories=(Category.SUSPECTED_HARDWARE,)),
             action="cordon_after", occurrences=3, window_s=day),
        Rule(name="application", match=Match(categories=(Category.APPLICATION,)), action="never"),
        Rule(name="nvlink-repeats", match=Match(families=(Family.NVLINK,)), action="cordon_after", occurrences=3,
             window_s=hour),
        Rule(name="contained-ecc-repeats", match=Match(xids=(94,)), action="cordon_after", occurrences=2,
             window_s=day),
    )


class Scope(_Strict):
    """Which nodes automatic cordons may touch. Empty lists mean no restriction."""

    pool_label: str = Field(
        default="xidpipe.io/pool",
        description="node label naming the node's pool; nodes without it form the pool '' "
        "(the breaker counts per pool)",
    )
    pools: tuple[str, ...] = Field(default=(), description="only nodes in these pools (empty: every pool)")
    gpu_model_label: str = Field(default="nvidia.com/gpu.product", description="label set by GPU feature discovery")
    gpu_models: tuple[str, ...] = Field(default=(), description="only nodes with these GPU models (empty: any)")
    node_selector: dict[str, str] = Field(default_factory=dict, description="labels a node must carry, all of them")
    opt_out_label: str = Field(
        default="xidpipe.io/cordon-opt-out",
        description="a node labelled <opt_out_label>=true is never cordoned automatically",
    )


class Breaker(_Strict):
    """The circuit breaker. Past either limit no further automatic cordon or GPU quarantine happens, a
    fleet incident is raised with the reason, and the breaker stays tripped until an operator resets it
    (`xidpipe breaker reset`). A pool's share is counted in nodes (cordoned, or with a GPU quarantined,
    by xidpipe) and, for a quarantine, in GPUs too."""

    max_pool_share: float = Field(
        default=0.10, gt=0, le=1,
        description="share of a pool's nodes that xidpipe may hold at the same time, cordoned or with a GPU "
        "quarantined, and of its GPUs that it may hold quarantined (10%: one bad rack or driver rollout must "
        "not take out a pool)",
    )
    min_nodes: int = Field(
        default=1, ge=0,
        description="nodes per pool that may always be cordoned, whatever the share gives (a pool of 5 nodes "
        "at 10% would otherwise never allow one)",
    )
    max_per_hour: int = Field(
        default=10, ge=0,
        description="cordons and GPU quarantines xidpipe may execute across the cluster in any rolling hour "
        "(counted from the action record)",
    )
    min_gpus: int = Field(
        default=1, ge=0,
        description="GPUs per pool that may always be quarantined, whatever `max_pool_share` of the pool's GPUs "
        "gives",
    )


class Quarantine(_Strict):
    """How the faulty GPU is found among the cluster's DRA devices (quarantine_gpu rules)."""

    driver: str = Field(default="gpu.nvidia.com", min_length=1, max_length=63,
                        description="the DRA driver whose ResourceSlice devices are the GPUs (NVIDIA's)")
    uuid_attribute: str = Field(default="uuid", min_length=1, max_length=63,
                                description="the device attribute that holds the GPU's UUID")


class Drain(_Strict):
    """Eviction of the pods that use the faulty GPU, through the Eviction API (PodDisruptionBudgets
    are honoured: a blocked eviction is retried with backoff until the deadline, then reported)."""

    enabled: bool = Field(default=False, description="off by default: a cordon stops new work; running work "
                          "is left to finish or fail unless this is on")
    unattributed: Literal["none", "gpu_requesting"] = Field(
        default="none",
        description="what to evict when the incident names no pod: nothing, or every pod on the node that "
        "requests nvidia.com/gpu",
    )
    deadline_s: float = Field(default=300.0, gt=0, description="give up retrying blocked evictions after this")
    backoff_initial_s: float = Field(default=1.0, gt=0, description="first wait after a 429")
    backoff_max_s: float = Field(default=30.0, gt=0, description="longest wait between retries")
    grace_period_s: int | None = Field(default=None, ge=0, description="pod grace period (None: the pod's own)")


class CordonPolicy(_Strict):
    version: Literal[1] = 1
    dry_run: bool = Field(default=False, description="decide and record every action, change nothing")
    default_action: Literal["never"] = Field(
        default="never", description="when no rule matches; only 'never' is allowed, so cordons are always explicit"
    )
    rules: tuple[Rule, ...] = Field(default_factory=_default_rules)
    scope: Scope = Field(default_factory=Scope)
    breaker: Breaker = Field(default_factory=Breaker)
    drain: Drain = Field(default_factory=Drain)
    quarantine: Quarantine = Field(default_factory=Quarantine)
    remediation: RemediationPolicy = Field(default_factory=RemediationPolicy)

    def longest_window_s(self) -> float:
        """The longest `cordon_after` window: how far back an incident's occurrences can matter (0: none)."""
        return max((r.window_s for r in self.rules if r.window_s is not None), default=0.0)

    @model_validator(mode="after")
    def _unique_rule_names(self) -> CordonPolicy:
        names = [r.name for r in self.rules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"rule names must be unique, repeated: {dupes}")
        return self


def policy_from_mapping(data: Any, source: str = "<policy>") -> CordonPolicy:
    """Validate parsed YAML; errors name the source and each offending field (`rules.2.window_s`)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: a policy is a mapping of keys, got {type(data).__name__}")
    try:
        return CordonPolicy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(f"{source}: invalid policy:\n{_describe(exc)}") from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(part) for part in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"  {field}: {msg}")
    return "\n".join(lines)
