"""`models.dcgm_diag` on outputs DCGM's diagnostics wrote (fixtures/dcgm_diag/README.md names each
source): the verdict, what failed, and what the validation Job carries in its termination message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.dcgm_diag import parse_diag
from models.remediation_jobs import MESSAGE_MAX, encode_termination, termination_text

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm_diag"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_a_passing_dcgm_3_run_passes_with_its_banner_line_before_the_document() -> None:
    text = fixture("dcgm-3.1.0-pass.txt")
    assert not text.lstrip().startswith("{")  # dcgmi printed a line first
    result = parse_diag(text)
    assert result.passed, result.summary
    assert result.version == "3.1.0"
    # 9 Deployment checks for all GPUs (the `null` entries between them skipped) and the software plugin per GPU.
    assert result.counts["pass"] == 9 + 8
    assert {r.entity for r in result.results if r.name == "software"} == {f"GPU {i}" for i in range(8)}
    assert result.findings == ()


def test_nvvs_1_3_sm_stress_failure_on_three_gpus_fails_and_names_the_test_and_its_warnings() -> None:
    result = parse_diag(fixture("nvvs-1.3-sm-stress-fail.json"))
    assert not result.passed
    assert "Stress/sm_stress" in result.summary
    assert len(result.findings) == 1  # one result for GPUs 0-3 in this version
    assert "did not exceed desired stress level of 3000.0 for GPU 2" in result.findings[0]
    assert result.counts["skip"] >= 4 and result.counts["fail"] == 1


def test_per_gpu_results_name_each_failing_gpu_with_dcgm_error_ids() -> None:
    result = parse_diag(fixture("nvvs-1.7-per-gpu-sm-stress-fail.json"))
    assert not result.passed
    failing = {r.entity for r in result.results if r.status == "fail"}
    assert failing == {"GPU 0", "GPU 2", "GPU 3"}
    assert all("(DCGM error 50)" in f for f in result.findings)
    # Skipped tests neither fail nor pass the node.
    assert result.counts["skip"] == 1 + 4 * 4  # memory on GPU 0; diagnostic, bandwidth, targeted stress and power


def test_dcgm_4_document_failing_its_software_test() -> None:
    result = parse_diag(fixture("dcgm-4.2.3-gb10-software-fail.json"))
    assert not result.passed
    assert result.version == "4.2.3" and result.driver_version == "580.82.09"
    assert result.findings == ("Deployment/software on GPU 0: fail: Persistence Mode: Persistence mode for GPU 0 "
                               "is disabled. Enable persistence mode by running \"nvidia-smi -i <gpuId> -pm 1 \" as "
                               "root. (DCGM error 29)",)


def test_the_dcgm_4_document_passes_once_its_failed_result_passed() -> None:
    doc = json.loads(fixture("dcgm-4.2.3-gb10-software-fail.json"))
    result = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
    result["status"], result["warnings"] = "Pass", []
    assert parse_diag(json.dumps(doc)).passed


@pytest.mark.parametrize(("text", "why"), [
    ("", "no JSON document"),
    ("Error: unable to connect to the host engine", "no JSON document"),
    ('{"DCGM GPU Diagnostic": {"runtime_error": "Unable to create NVVS process", "version": "3.3.9"}}',
     "could not run: Unable to create NVVS process"),
    ('{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", "results": '
     '[{"entity_group": "GPU", "entity_id": 0, "status": "Skip"}]}]}]}}', "no test ran"),
    ('{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", "results": '
     '[{"entity_group": "GPU", "entity_id": 0, "status": "Warn", "warnings": [{"warning": "w"}]}]}]}]}}',
     "failed or warned"),
    ('{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", "results": '
     '[{"entity_group": "GPU", "entity_id": 0, "status": "Inconclusive"}]}]}]}}', "no test ran"),
])
def test_the_verdict_fails_closed(text: str, why: str) -> None:
    result = parse_diag(text)
    assert not result.passed
    assert why in result.summary


def test_a_level_2_output_travels_in_a_termination_message_and_reads_back() -> None:
    """The validation Job writes its output gzip+base64 into /dev/termination-log (4096 bytes kept)."""
    text = fixture("nvvs-1.7-per-gpu-sm-stress-fail.json")
    message = encode_termination(text)
    assert len(text) > MESSAGE_MAX > len(message)
    assert termination_text(message) == text
    assert parse_diag(termination_text(message)).findings == parse_diag(text).findings
    assert termination_text('{"plain": 1}') == '{"plain": 1}'
