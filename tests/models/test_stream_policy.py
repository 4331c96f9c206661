"""The stream policy's names: the fleet families are vocabulary members, named as strings in settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from models.stream_policy import PipelinePolicy
from models.vocabulary import Family


def test_the_default_fleet_families_leave_out_application_recovery_action_and_other() -> None:
    assert set(Family) - set(PipelinePolicy().fleet_families) == {Family.APPLICATION, Family.RECOVERY_ACTION,
                                                                  Family.OTHER}


def test_fleet_families_are_read_from_their_names_and_refused_when_unknown() -> None:
    policy = PipelinePolicy.model_validate({"fleet_families": ["gpu_lost", "nvlink"]})
    assert policy.fleet_families == (Family.GPU_LOST, Family.NVLINK)
    assert policy.model_dump(mode="json")["fleet_families"] == ["gpu_lost", "nvlink"]
    assert "memory" not in policy.fleet_families and "nvlink" in policy.fleet_families
    with pytest.raises(ValidationError, match="fleet_families"):
        PipelinePolicy.model_validate({"fleet_families": ["gpu_lost", "gpu_gone"]})
