"""Kernel-log fault parsing: every form in which the NVIDIA driver reports GPU faults."""

from models.kernlog.parser import KernelLogParser, ParseOptions, parse_lines
from models.kernlog.record import CONTRACT_FIELDS, KINDS, FaultRecord

__all__ = ["CONTRACT_FIELDS", "KINDS", "FaultRecord", "KernelLogParser", "ParseOptions", "parse_lines"]
