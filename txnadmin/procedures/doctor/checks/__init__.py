"""Doctor's checks, one family per module, each a pure function of the survey: ``check(survey, thresholds)``
returns findings and reads nothing (the survey read everything), so no admin error can escape a check.

A family module names itself (``NAME``), says in one line what it checks (``SUMMARY``) and defines ``check``. To
add one: write its module, list it in ``FAMILIES`` (the order reports and ``--help`` use), and test it on a
hand-made :class:`~txnadmin.procedures.doctor.survey.Survey` (tests/test_doctor_checks.py shows how).
"""

from __future__ import annotations

from typing import Callable

from ..report import Finding
from ..survey import Survey
from . import (
    batched_log, bookie_rocksdb, clients, coordinators, coverage, leftovers, max_read_position, permissions, recovery,
    snapshots, stuck, versions,
)

CheckFn = Callable[[Survey, dict], list[Finding]]
FAMILIES = (coordinators, stuck, max_read_position, recovery, snapshots, batched_log, leftovers, coverage, versions,
            clients, permissions, bookie_rocksdb)
CHECKS: dict[str, CheckFn] = {family.NAME: family.check for family in FAMILIES}
CHECK_HELP: dict[str, str] = {family.NAME: family.SUMMARY for family in FAMILIES}
# Checks that judge what the topic survey read (buffers, pending-ack stores): `coverage`, which reports what that
# survey could not read (a 403 on a namespace, buffers or stores that did not answer), always runs with them, or
# `--only recovery` on a namespace doctor may not list would pass for a clean run.
TOPIC_CHECKS = (max_read_position.NAME, recovery.NAME, snapshots.NAME, leftovers.NAME)
