"""The result of `dcgmi diag -r <level> -j`, read: did the node pass, and if not, what failed.

Both document shapes DCGM has written are read (NVIDIA/DCGM `nvvs/include/NvvsJsonStrings.h`):

- DCGM up to 3.x: `{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_ids" (a list "0,1" or a number), "status" (PASS, FAIL, SKIP, WARN), "warnings"
  (strings, or objects with "warning" and "error_id"), "info"}]}]}], "version"}}`;
- DCGM 4.x: `{"DCGM Diagnostic": {"test_categories": [... results by "entity_group", "entity_id",
  statuses Pass, Fail, Skip, Warn, Not Run ..., "test_summary"]}, "entity_groups", "metadata":
  {"version", "Driver Version Detected"}}`, with `runtime_error` when nothing could run.

dcgmi may print a line before the document (a banner, a warning): the document is read from its
first `{`. The verdict fails closed: a failed or warned test, a runtime error, a document that does
not read, or one in which no test ran, is not a pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "warn", "skip", "not_run"]
_STATUSES: dict[str, Status] = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
                                "skipped": "skip", "not run": "not_run", "notrun": "not_run"}
_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
FINDINGS_MAX = 20


@dataclass(frozen=True, slots=True)
class TestResult:
    category: str
    name: str
    entity: str  # "GPU 0", "GPUs 0,1,2,3", or "" for a whole-node result
    status: Status
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DiagResult:
    passed: bool
    summary: str
    version: str | None = None
    driver_version: str | None = None
    results: tuple[TestResult, ...] = ()
    findings: tuple[str, ...] = ()  # what failed or warned, one line each
    runtime_error: str | None = None
    counts: dict[str, int] = field(default_factory=dict)


def _status(raw: Any) -> Status:
    """A status word; one this reader does not know is `not_run`, never a pass."""
    return _STATUSES.get(str(raw or "").strip().lower(), "not_run")


def _warnings(raw: Any) -> tuple[str, ...]:
    out: list[str] = []
    for w in raw if isinstance(raw, list) else []:
        if isinstance(w, dict):
            text = str(w.get("warning") or "").strip()
            if w.get("error_id") is not None:
                text = f"{text} (DCGM error {w['error_id']})"
            out.append(text)
        elif w:
            out.append(str(w).strip())
    return tuple(x for x in out if x)


def _entity(result: dict[str, Any]) -> str:
    if "entity_id" in result:
        group = str(result.get("entity_group") or "GPU")
        return f"{group} {result['entity_id']}"
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None or ids == "":
        return ""
    text = str(ids)
    return f"GPUs {text}" if "," in text else f"GPU {text}"


def _document(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _results(root: dict[str, Any]) -> list[TestResult]:
    out: list[TestResult] = []
    categories = root.get("test_categories")
    for cat in categories if isinstance(categories, list) else []:
        if not isinstance(cat, dict):
            continue
        tests = cat.get("tests")
        for test in tests if isinstance(tests, list) else []:
            if not isinstance(test, dict):
                continue  # DCGM 3.x writes `null` between tests
            results = test.get("results")
            for r in results if isinstance(results, list) else []:
                if isinstance(r, dict):
                    out.append(TestResult(str(cat.get("category") or ""), str(test.get("name") or "?"), _entity(r),
                                          _status(r.get("status")), _warnings(r.get("warnings"))))
    return out


def parse_diag(text: str | None) -> DiagResult:
    """The verdict of a `dcgmi diag -j` output."""
    data = _document(text or "")
    if data is None:
        return DiagResult(passed=False, summary="the diagnostic's output holds no JSON document")
    root: dict[str, Any] = next((data[k] for k in _ROOTS if isinstance(data.get(k), dict)), data)
    found = data.get("metadata")
    metadata: dict[str, Any] = found if isinstance(found, dict) else {}
    version = root.get("version") or metadata.get("version")
    driver = metadata.get("Driver Version Detected") or root.get("Driver Version Detected") or root.get(
        "driver_version_detected")
    error = root.get("runtime_error") or data.get("runtime_error")
    results = _results(root)
    counts = {s: sum(1 for r in results if r.status == s) for s in ("pass", "fail", "warn", "skip", "not_run")}
    bad = [r for r in results if r.status in ("fail", "warn")]
    findings = tuple(f"{r.category}/{r.name}{f' on {r.entity}' if r.entity else ''}: {r.status}"
                     f"{': ' + '; '.join(r.warnings) if r.warnings else ''}" for r in bad)[:FINDINGS_MAX]
    ver, drv = (str(version) if version else None), (str(driver) if driver else None)

    def verdict(passed: bool, summary: str) -> DiagResult:
        return DiagResult(passed=passed, summary=summary, version=ver, driver_version=drv, results=tuple(results),
                          findings=findings, runtime_error=str(error) if error else None, counts=counts)

    if error:
        return verdict(False, f"the diagnostic could not run: {error}")
    if bad:
        names = sorted({f"{r.category}/{r.name}" for r in bad})
        return verdict(False, f"{len(bad)} result(s) failed or warned: {', '.join(names)}")
    if counts["pass"] == 0:
        return verdict(False, f"no test ran ({len(results)} result(s), none passed): nothing was validated")
    skipped = counts["skip"] + counts["not_run"]
    return verdict(True, f"{counts['pass']} result(s) passed" + (f", {skipped} skipped" if skipped else ""))
