"""Everyone affected is told: one notice per workload an incident's fault hit, to its owner's channel,
in the owner's words.

A hardware fault on a GPU kills every job on it; the owners of those jobs are not the infrastructure
team, and "your application crashed" is the wrong thing to tell them. For an incident of a class that
kills the work on its GPU, NVSwitch or node (`KILLED_BY`: hardware, suspected hardware, interconnect,
driver, thermal), each workload of the account (`models.account.Account.affected`) is told, once, in its
team's channel:

    Your job team-nlp/bert-finetune/finetune (pod bert-finetune-2, namespace team-nlp) was killed by a
    hardware fault on GPU 0 (serial 1654923008817) of gpu-node-02 (Xid 48), not by your application:
    requeue it. What xidpipe decided about the GPU and its node: <the account's decision sentence>

Every word about the decision is the account's (`models.account.decision_text`); the GPU is named as
people name it (`models.dossier.gpu_label`), the code is the account's decisive one.

Routing is the team's (`models.chat_message.team_channel`): the routing policy's namespace mapping, else
the namespace's label or annotation `Routing.team_channel_key`. What is not told, and why:

- **An application incident**: its own message already goes to its team's channel, in its own words
  (`models.chat_message.route`); a second message would say the same thing twice.
- **A workload whose channel is the infrastructure channel**: the incident's own message went there and
  names the workload; a second message in the same channel adds nothing.
- **A workload whose namespace names no channel** (it would go to the default channel): no owner is known
  to address "your job" to, and the default channel is not theirs; the incident's own message names it.
- **A workload with neither namespace nor pod** (a bare process): there is nothing to route by.

One notice per workload: pods of one workload (the same namespace and workload name, or the same pod)
share it and it names them all. Its `key` (`affected:<namespace>/<workload>`) is what the sink
remembers it sent, so a redelivered incident tells nobody twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from models.account import Account, AffectedWorkload, decision_text
from models.chat_message import AffectedMessage, Routing, team_channel
from models.dossier import Dossier, account_of, gpu_label
from models.redact import redact
from models.vocabulary import Category, ComponentKind

# The incident classes whose fault kills the work on its hardware, and how the owner is told what did.
KILLED_BY: dict[str, str] = {
    Category.HARDWARE: "a hardware fault",
    Category.SUSPECTED_HARDWARE: "a suspected hardware fault",
    Category.INTERCONNECT: "an interconnect fault",
    Category.DRIVER: "a GPU driver fault",
    Category.THERMAL: "a thermal fault",
}


@dataclass(frozen=True, slots=True)
class AffectedNotice:
    """What one workload hit by the incident is told, where, and why (`channel` None: not told)."""

    key: str  # affected:<namespace>/<workload>: once per incident and workload
    namespace: str | None
    workload: str  # the workload's name, else its pod's
    pods: tuple[str, ...]
    owner: str | None
    channel: str | None
    reason: str
    message: AffectedMessage | None = None

    @property
    def told(self) -> bool:
        return self.channel is not None and self.message is not None


def _where(d: Dossier) -> str:
    """The hardware as people name it: the GPU and its node, the NVSwitch and its node, or the node."""
    if d.component == ComponentKind.NVSWITCH:
        return f"NVSwitch {d.gpu.pci} of {d.node}" if d.gpu.pci else f"an NVSwitch of {d.node}"
    if d.component == ComponentKind.NODE:
        return d.node
    label = gpu_label(d)
    return f"{label} of {d.node}" if label else f"a GPU of {d.node}"


def _by_workload(affected: tuple[AffectedWorkload, ...]) -> dict[tuple[str | None, str], list[AffectedWorkload]]:
    """The account's workloads, one entry per workload (its pods together), in the order they faulted."""
    out: dict[tuple[str | None, str], list[AffectedWorkload]] = {}
    for w in affected:
        name = w.workload or w.pod
        if name:
            out.setdefault((w.namespace, name), []).append(w)
    return out


def _text(d: Dossier, acct: Account, workload: str, namespace: str | None, pods: tuple[str, ...]) -> str:
    where = ", ".join(p for p in (
        f"pod{'s' if len(pods) > 1 else ''} {', '.join(pods)}" if pods else "",
        f"namespace {namespace}" if namespace else "") if p)
    code = f" ({acct.decisive_code})" if acct.decisive_code else ""
    return (f"Your job {workload}{f' ({where})' if where else ''} was killed by {KILLED_BY[d.category]} on "
            f"{_where(d)}{code}, not by your application: requeue it. What xidpipe decided about the "
            f"{'GPU' if d.component == ComponentKind.GPU else 'hardware'} and its node: {decision_text(acct)}")


def _message(d: Dossier, acct: Account, workload: str, namespace: str | None, pods: tuple[str, ...],
             incident_url: str | None) -> AffectedMessage:
    links = (("Incident page", incident_url),) if incident_url else ()
    return AffectedMessage(
        title=redact(f"Your job {workload} was killed by {KILLED_BY[d.category]} on {d.node}"),
        text=redact(_text(d, acct, workload, namespace, pods)),
        context=redact(f"incident {d.incident_id} · {d.category} · {d.family}"), links=links)


def _not_told(d: Dossier, channel: str, how: str, routing: Routing, namespace: str | None) -> str | None:
    """Why the workload is not told (None: it is)."""
    if d.category not in KILLED_BY:
        return (f"a {d.category} incident's own message goes to the team's channel in its own words: "
                "nobody else to tell")
    if not namespace:
        return "the workload names no namespace: nothing to route by"
    if channel == routing.infra_channel:
        return f"the team's channel is the infrastructure channel {channel}, which the incident's message reached"
    if channel == routing.default_channel and namespace not in routing.namespace_channels:
        return f"{how}: no owner known to tell; the incident's message names the workload"
    return None


def affected_notices(d: Dossier, namespaces: Mapping[str, Mapping[str, str]], routing: Routing,
                     incident_url: str | None = None) -> list[AffectedNotice]:
    """One notice per workload the incident's faults hit (`Account.affected`): where it goes and what it
    says, or why it is not sent. `namespaces` maps a namespace to its labels and annotations."""
    acct = account_of(d)
    out: list[AffectedNotice] = []
    for (namespace, workload), hits in _by_workload(acct.affected).items():
        pods = tuple(dict.fromkeys(w.pod for w in hits if w.pod))
        owner = next((w.owner for w in hits if w.owner), None)
        key = f"affected:{namespace or ''}/{workload}"
        channel, how = team_channel(namespace, namespaces.get(namespace or "", {}), routing)
        why_not = _not_told(d, channel, how, routing, namespace)
        if why_not is not None:
            out.append(AffectedNotice(key, namespace, workload, pods, owner, None, why_not))
            continue
        out.append(AffectedNotice(key, namespace, workload, pods, owner, channel, how,
                                  _message(d, acct, workload, namespace, pods, incident_url or d.incident_url)))
    return out
