"""A program's slice of the plan and one work's bounds: scalar Triton device functions.

Shared by the plain-Triton decode (`kernels.triton_mla`) and the Gluon decodes
(`kernels.gluon_mla`, which call them as they are: they touch scalars only), so it sits
beside both packages and imports neither. The test-hook faults that live here
(`kernels.triton_mla.FAULTS` 1, 2 and 4) thus break every kernel alike.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def program_slice(
    work_indptr_ptr, q_scale_ptr, kv_scale_ptr, q_scale_value, kv_scale_value, sm_scale_log2,
    SCALES_IN_MEMORY: tl.constexpr, GROUP_MODE: tl.constexpr, FAULT: tl.constexpr,
):  # fmt: skip
    """(head group, first work, end work, kv_scale, score scale) of this program.

    GROUP_MODE 0: program p walks slice p. Otherwise the grid is (groups, programs) and the
    programs (g, p) of every g walk slice p at once, so the KV of one range is read by
    `groups` programs side by side (the second read mostly hits L2): GROUP_MODE 1 (a folded
    plan) has program g take only the works of head group g; GROUP_MODE 2 (a plan made for
    heads_per_work of the H = groups · heads_per_work heads) has it take every work, for
    heads [g · heads_per_work, (g + 1) · heads_per_work).
    """
    if GROUP_MODE == 0:
        pid = tl.program_id(0)
        grp = 0
    else:
        pid = tl.program_id(1)
        grp = tl.program_id(0)
    work_begin = tl.load(work_indptr_ptr + pid)
    work_end = tl.load(work_indptr_ptr + pid + 1)
    if SCALES_IN_MEMORY:
        q_scale = tl.load(q_scale_ptr)
        kv_scale = tl.load(kv_scale_ptr)
    else:
        q_scale = q_scale_value
        kv_scale = kv_scale_value
    if FAULT == 2:
        kv_scale = kv_scale * 0.0 + 1.0  # broken on purpose: kv_scale dropped
    return grp, work_begin, work_end, kv_scale, sm_scale_log2 * q_scale * kv_scale


@triton.jit
def work_span(
    work_info_ptr, w, qo_indptr_ptr, kv_indptr_ptr, kv_last_page_lens_ptr, heads_per_work,
    fold_ratio, grp, PAGE_SIZE: tl.constexpr, GROUP_MODE: tl.constexpr, FAULT: tl.constexpr,
):  # fmt: skip
    """Work `w`: (partial location, first virtual q row, head group, first head in a partial
    row, the batch's first q token, its q length, first page, page count, kv length, token
    range [lo, hi) of the work, packed rows to run)."""
    info = work_info_ptr + w * 8
    vbatch = tl.load(info + 0)
    partial_loc = tl.load(info + 1)
    qo_start = tl.load(info + 2)
    qo_end = tl.load(info + 3)
    kv_start = tl.load(info + 4)
    kv_end = tl.load(info + 5)
    kv_offset = tl.load(info + 6)

    batch = vbatch // fold_ratio
    group = vbatch % fold_ratio
    part_head = 0  # first head of this program's heads in a partial row
    if GROUP_MODE == 2:
        group = grp
        part_head = grp * heads_per_work
    q_begin = tl.load(qo_indptr_ptr + batch)
    q_len = tl.load(qo_indptr_ptr + batch + 1) - q_begin
    page_begin = tl.load(kv_indptr_ptr + batch)
    num_pages = tl.load(kv_indptr_ptr + batch + 1) - page_begin
    last_len = tl.load(kv_last_page_lens_ptr + batch)
    kv_len = tl.where(num_pages > 0, (num_pages - 1) * PAGE_SIZE + last_len, 0)
    if PAGE_SIZE == 1:
        kv_len = num_pages
    tok_lo = (kv_start - page_begin) * PAGE_SIZE
    tok_hi = kv_len - kv_offset
    if FAULT == 1:
        # Broken on purpose: whole pages up to kv_end, last-page length ignored.
        tok_hi = (kv_end - page_begin) * PAGE_SIZE
        kv_len = num_pages * PAGE_SIZE

    num_rows = (qo_end - qo_start) * heads_per_work
    if GROUP_MODE == 1:
        num_rows = tl.where(group == grp, num_rows, 0)  # another program's head group
    if FAULT == 4 and GROUP_MODE != 0:
        num_rows = tl.where(grp == 1, 0, num_rows)  # broken on purpose: group 1 idles
    return (
        partial_loc, qo_start, group, part_head, q_begin, q_len, page_begin, num_pages, kv_len,
        tok_lo, tok_hi, num_rows,
    )  # fmt: skip
