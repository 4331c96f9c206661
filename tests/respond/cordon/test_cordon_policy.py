"""The cordon policy file: the documented defaults, the shipped examples, and bad files rejected
with a message naming the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from models.cordon_policy import CordonPolicy, PolicyError
from respond.cordon.policy_file import load_policy, load_policy_text

REPO = Path(__file__).resolve().parents[3]


def yaml_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", markdown.read_text(), flags=re.S)


def test_no_file_means_the_documented_defaults() -> None:
    policy = load_policy(None)

    assert policy == CordonPolicy()
    assert (policy.breaker.max_pool_share, policy.drain.enabled, policy.dry_run) == (0.10, False, False)


def test_the_example_policy_is_the_defaults_spelled_out() -> None:
    assert load_policy(REPO / "deploy" / "policy.example.yaml") == CordonPolicy()


def test_the_policy_in_docs_configuration_loads() -> None:
    [block] = yaml_blocks(REPO / "docs" / "configuration.md")

    policy = load_policy_text(block, "docs/configuration.md")

    assert policy.scope.pools == ("train-h200", "infer-h200")
    assert policy.drain.enabled and policy.breaker.max_pool_share == 0.05
    assert [r.name for r in policy.rules][:3] == ["dbe-quarantine", "gpu-lost", "double-bit-error"]
    assert (policy.rules[0].action, policy.rules[0].taint_effect) == ("quarantine_gpu", "NoSchedule")
    assert policy.quarantine.driver == "gpu.nvidia.com" and policy.breaker.min_gpus == 1


def test_an_empty_file_is_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing changed\n")

    assert load_policy(path) == CordonPolicy()


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("breaker: {max_pool_share: 1.5}", "breaker.max_pool_share", "less than or equal to 1"),
        ("breaker: {max_pool_share: 0}", "breaker.max_pool_share", "greater than 0"),
        ("breaker: {max_per_hour: -1}", "breaker.max_per_hour", "greater than or equal to 0"),
        ("breaker: {max_pool_shares: 0.1}", "breaker.max_pool_shares", "Extra inputs are not permitted"),
        ("dry_runn: true", "dry_runn", "Extra inputs are not permitted"),
        ("version: 2", "version", "Input should be 1"),
        ("default_action: cordon_now", "default_action", "Input should be 'never'"),
        ("rules: [{name: a, action: cordon_after, occurrences: 3}]", "rules.0",
         "cordon_after needs both occurrences and window_s"),
        ("rules: [{name: a, action: never, window_s: 60}]", "rules.0", "only apply to cordon_after"),
        ("rules: [{name: a, action: cordon_later}]", "rules.0.action",
         "'cordon_now', 'cordon_after', 'quarantine_gpu' or 'never'"),
        ("rules: [{name: a, action: never}, {name: b, action: cordon_now, match: {families: [gpu_gone]}}]",
         "rules.1.match", "unknown fault family ['gpu_gone']"),
        ("rules: [{name: a, action: cordon_now, match: {xids: [0]}}]", "rules.0.match", "between 1 and 1023"),
        ("rules: [{name: a, action: cordon_now, match: {immediate_actions: [REBOOT]}}]", "rules.0.match",
         "unknown NVIDIA immediate action"),
        ("rules: [{name: a, action: never}, {name: a, action: never}]", "(top level)", "repeated: ['a']"),
        ("rules: [{name: a, action: cordon_after, occurrences: 0, window_s: 60}]", "rules.0.occurrences",
         "greater than or equal to 1"),
        ("drain: {enabled: maybe}", "drain.enabled", "valid boolean"),
        ("scope: {pools: train}", "scope.pools", "valid tuple"),
    ],
)
def test_bad_files_are_rejected_naming_the_field(tmp_path: Path, text: str, field: str, message: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text + "\n")

    with pytest.raises(PolicyError) as exc:
        load_policy(path)

    assert str(exc.value).startswith(f"{path}: invalid policy:")
    assert f"  {field}: " in str(exc.value) and message in str(exc.value), str(exc.value)


@pytest.mark.parametrize(("text", "message"), [
    ("rules: [a\n", "not valid YAML"),
    ("- just\n- a list\n", "a policy is a mapping of keys, got list"),
])
def test_unreadable_policies(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)

    with pytest.raises(PolicyError, match=re.escape(message)):
        load_policy(path)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"nope\.yaml: cannot read policy file"):
        load_policy(tmp_path / "nope.yaml")
