"""Persistent MLA decode: the work-plan format, its planner and its invariants."""

from __future__ import annotations

from conformance.persistent.invariants import (
    PlanViolation,
    assert_plan_invariants,
    check_inputs,
    check_plan,
)
from conformance.persistent.plan import WORK_INFO_FIELDS, WorkInfo, WorkPlan
from conformance.persistent.planner import plan_persistent_decode
from conformance.persistent.profiles import (
    PROFILES,
    ArchProfile,
    HeadLayout,
    dtype_class,
    get_profile,
    register_profile,
)
from conformance.persistent.sizing import (
    UNWRITTEN,
    allocate_metadata_buffers,
    metadata_buffer_sizes,
)

__all__ = [
    "PROFILES",
    "UNWRITTEN",
    "WORK_INFO_FIELDS",
    "ArchProfile",
    "HeadLayout",
    "PlanViolation",
    "WorkInfo",
    "WorkPlan",
    "allocate_metadata_buffers",
    "assert_plan_invariants",
    "check_inputs",
    "check_plan",
    "dtype_class",
    "get_profile",
    "metadata_buffer_sizes",
    "plan_persistent_decode",
    "register_profile",
]
