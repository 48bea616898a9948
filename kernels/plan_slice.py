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
    work_indptr_ptr, work_info_ptr, fold_ratio, seq_q, q_scale_ptr, kv_scale_ptr,
    q_scale_value, kv_scale_value, sm_scale_log2,
    SCALES_IN_MEMORY: tl.constexpr, GROUP_MODE: tl.constexpr, FAULT: tl.constexpr,
):  # fmt: skip
    """(head group, first work, end work, kv_scale, score scale) of this program.

    GROUP_MODE 0: program p walks slice p. Otherwise the grid is (groups, programs) and the
    programs (g, p) of every g walk slice p at once, so the KV of one range is read by
    `groups` programs side by side (the second read mostly hits L2): GROUP_MODE 1 (a folded
    plan) has program g take only the works of head group g; GROUP_MODE 2 (a plan made for
    heads_per_work of the H = groups · heads_per_work heads) has it take every work, for
    heads [g · heads_per_work, (g + 1) · heads_per_work); GROUP_MODE 3 (a folded plan) has
    program g take the works of head group g that start where slice p's group-0 works run
    (`paired_range`), so both groups of one KV range run side by side wherever the plan put
    the second group's works.
    """
    if GROUP_MODE == 0:
        pid = tl.program_id(0)
        grp = 0
    else:
        pid = tl.program_id(1)
        grp = tl.program_id(0)
    work_begin = tl.load(work_indptr_ptr + pid)
    work_end = tl.load(work_indptr_ptr + pid + 1)
    if GROUP_MODE == 3:
        num_works = tl.load(work_indptr_ptr + tl.num_programs(1))
        work_begin, work_end = paired_range(
            work_info_ptr, work_begin, work_end, num_works, grp, fold_ratio, seq_q
        )
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
def _group_at(work_info_ptr, w, num_works, fold_ratio):
    """Head group of work `w`, or -1 past `num_works`."""
    vbatch = tl.load(work_info_ptr + w * 8, mask=w < num_works, other=-1)
    return tl.where(w < num_works, vbatch % fold_ratio, -1)


@triton.jit
def _start_key(work_info_ptr, w, num_works, fold_ratio, seq_q):
    """Where work `w` starts, comparable across head groups: its first q token · 2³² + its
    first page (an index into kv_indices); the largest int64 past `num_works`."""
    info = work_info_ptr + w * 8
    inside = w < num_works
    vrow = tl.load(info + 2, mask=inside, other=0)
    page = tl.load(info + 4, mask=inside, other=0)
    token = (vrow // (fold_ratio * seq_q)) * seq_q + vrow % seq_q
    key = token.to(tl.int64) * 4294967296 + page
    return tl.where(inside, key, 9223372036854775807)


@triton.jit
def paired_range(work_info_ptr, begin, end, num_works, grp, fold_ratio, seq_q):
    """Works ``[first, last)`` holding the head-group-`grp` works that start within the span
    of the group-0 works of slice ``[begin, end)`` (that slice itself for group 0).

    A folded plan covers every request's (q token, page) space once per head group, cut in
    different places; the group-0 works of consecutive slices tile it in order, and a
    group-g work goes to the slice whose group-0 span holds its start: from the slice's
    first group-0 work to the next slice's. Group-g works are in start order, so they are
    one run; other groups' works inside it are skipped by `work_span`. Linear scans: a few
    works where every request fits in about one slice, long where a request spans many.
    """
    first = begin
    last = end
    if grp != 0:
        f = begin  # the slice's first group-0 work (end: none)
        while _group_at(work_info_ptr, f, end, fold_ratio) > 0:
            f += 1
        h = end  # the next group-0 work after the slice (num_works: none)
        while _group_at(work_info_ptr, h, num_works, fold_ratio) > 0:
            h += 1
        lo = _start_key(work_info_ptr, f, num_works, fold_ratio, seq_q)
        hi = _start_key(work_info_ptr, h, num_works, fold_ratio, seq_q)
        first = tl.where(f < end, f, num_works)
        while (first < num_works) & (
            (_group_at(work_info_ptr, first, num_works, fold_ratio) != grp)
            | (_start_key(work_info_ptr, first, num_works, fold_ratio, seq_q) < lo)
        ):
            first += 1
        last = first
        while (last < num_works) & (
            (_group_at(work_info_ptr, last, num_works, fold_ratio) != grp)
            | (_start_key(work_info_ptr, last, num_works, fold_ratio, seq_q) < hi)
        ):
            last += 1
    return first, last


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
    if GROUP_MODE == 1 or GROUP_MODE == 3:
        num_rows = tl.where(group == grp, num_rows, 0)  # another program's head group
    if FAULT == 4 and GROUP_MODE != 0:
        num_rows = tl.where(grp == 1, 0, num_rows)  # broken on purpose: group 1 idles
    return (
        partial_loc, qo_start, group, part_head, q_begin, q_len, page_begin, num_pages, kv_len,
        tok_lo, tok_hi, num_rows,
    )  # fmt: skip
