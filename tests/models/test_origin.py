"""Only the kernel writes driver messages: a record's facility says who wrote it."""

from __future__ import annotations

import pytest

from models.kernlog.origin import journal_origin, kmsg_origin


@pytest.mark.parametrize(("priority", "kernel"), [
    (0, True), (3, True), (4, True), (7, True),  # kern.emerg .. kern.debug
    (8, False), (12, False), (14, False),  # user facility: `echo '<4>...' > /dev/kmsg` arrives as 12
    (30, False), (191, False), (-1, False),
])
def test_kmsg_records_of_the_kernel_facility_only(priority: int, kernel: bool) -> None:
    origin = kmsg_origin(priority)
    assert origin.kernel is kernel
    assert ("kernel facility" in origin.reason) is kernel


@pytest.mark.parametrize(("transport", "facility", "kernel"), [
    ("kernel", "0", True), ("kernel", 0, True), ("kernel", None, True),
    ("kernel", "1", False), ("kernel", "3", False),  # written into /dev/kmsg from user space
    ("syslog", "0", False), ("journal", "0", False), ("stdout", None, False), (None, "0", False),
])
def test_journal_entries_of_the_kernel_transport_and_facility_only(transport: object, facility: object,
                                                                     kernel: bool) -> None:
    assert journal_origin(transport, facility).kernel is kernel
