"""The closed loop after the cordon: drain, remediate as NVIDIA advises (a GPU reset, a node reboot,
a hand-off to the site's tooling), validate with DCGM, return to service, or mark the card for RMA;
with budgets, evidence first, and nothing done twice (docs/remediation.md).

- `intake`: opens a loop per cordon (the port of the cordon's `remediate` step);
- `loop` and `execution`: the remediator, which advances the loops (the persisted state machine);
- `kube_jobs`: its Kubernetes adapter (`port.LoopCluster`), `webhook`: the hand-off's POST;
- `notify`: each transition told to the ticket and the chat once;
- `returns`: return to service and its hooks (GPU quarantine deletes its rule there);
- `runtime`: building it from the responder's executor.
"""
