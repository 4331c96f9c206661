"""GPU quarantine: one GPU taken out with a DRA DeviceTaintRule instead of its node cordoned.

The decision is the cordon's (`models.cordon.decide_cordon` with a `quarantine_gpu` rule), its steps
are on the cordon's step seam (`respond.cordon.steps.quarantine`, `quarantine_condition`); here are
the cluster side (`kube_devices`: the ResourceSlice cache, the rules; `kube_cluster`: the one adapter
of every port), the release (`release.release_quarantine`) and the reconciliation of the rules with
the incidents (`reconcile`).
"""
