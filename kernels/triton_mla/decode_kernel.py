"""The persistent MLA decode kernel: each program walks its slice of the work plan.

Loop structure: the tiles below every row's causal limit and the work's kv end run unmasked
(no load masks, no score mask; the page id of the next tile is read one tile ahead, so
Triton's pipeliner gives the KV loads all of ``num_stages``); the last, partial tiles run
masked; pages smaller than a tile take one page lookup per token. Each tile is one
`attend` step (`kernels.triton_mla.tile`; `load_attend` loads the tile first). One kernel
in one module: its work loop, row packing, tile loops and epilogue share some twenty locals,
and splitting it further would scatter one loop nest over several files.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.plan_slice import program_slice, work_span
from kernels.triton_mla.tile import attend, load_attend, operand, store_rows, tile_ptr


@triton.jit
def persistent_mla_decode_kernel(
    q_ptr,
    kv_ptr,
    out_ptr,
    lse_ptr,
    part_o_ptr,
    part_lse_ptr,
    work_indptr_ptr,
    work_info_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    kv_last_page_lens_ptr,
    qo_indptr_ptr,
    q_scale_ptr,
    kv_scale_ptr,
    q_scale_value,
    kv_scale_value,
    sm_scale_log2,
    stride_q_tok,
    stride_q_head,
    stride_kv_block,
    stride_kv_slot,
    stride_o_tok,
    stride_o_head,
    stride_lse_tok,
    stride_lse_head,
    stride_po_row,
    stride_po_head,
    stride_pl_row,
    stride_pl_head,
    heads_per_work,
    fold_ratio,
    seq_q,
    PAGE_SIZE: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_V: tl.constexpr,
    D_R: tl.constexpr,
    DOT_T: tl.constexpr,
    QK_FP8: tl.constexpr,
    P_FP8: tl.constexpr,
    V_F16: tl.constexpr,
    F16_TILE: tl.constexpr,
    REG_PREFETCH: tl.constexpr,
    SCALES_IN_MEMORY: tl.constexpr,
    GROUP_MODE: tl.constexpr,
    ABLATE: tl.constexpr,
    FAULT: tl.constexpr,
):
    grp, work_begin, work_end, kv_scale, score_scale = program_slice(
        work_indptr_ptr, work_info_ptr, fold_ratio, seq_q, q_scale_ptr, kv_scale_ptr,
        q_scale_value, kv_scale_value, sm_scale_log2, SCALES_IN_MEMORY, GROUP_MODE, FAULT,
    )  # fmt: skip

    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_v = tl.arange(0, D_V)
    offs_r = tl.arange(0, D_R)
    # Loop-invariant int32 offsets of a tile inside its page (tiles never straddle pages when
    # PAGE_SIZE >= BLOCK_N): only a scalar base pointer changes from tile to tile.
    tile_kv_offs = offs_n[:, None] * stride_kv_slot + offs_v[None, :]
    tile_rope_offs = offs_n[:, None] * stride_kv_slot + (D_V + offs_r)[None, :]

    for w in range(work_begin, work_end):
        (
            partial_loc, qo_start, group, part_head, q_begin, q_len, page_begin, num_pages,
            kv_len, tok_lo, tok_hi, num_rows,
        ) = work_span(
            work_info_ptr, w, qo_indptr_ptr, kv_indptr_ptr, kv_last_page_lens_ptr,
            heads_per_work, fold_ratio, grp, PAGE_SIZE, GROUP_MODE, FAULT,
        )  # fmt: skip
        for m0 in range(0, num_rows, BLOCK_M):
            rows = m0 + offs_m
            row_ok = rows < num_rows
            vrow = qo_start + rows // heads_per_work  # virtual q row
            head_local = rows % heads_per_work
            # Virtual row -> real token: [B, r, S] order -> [B, S] (identity when r == 1).
            token = (vrow // (fold_ratio * seq_q)) * seq_q + vrow % seq_q
            head = group * heads_per_work + head_local
            if CAUSAL:
                row_hi = tl.minimum(kv_len - q_len + (token - q_begin) + 1, tok_hi)
            else:
                row_hi = tl.zeros([BLOCK_M], dtype=tl.int32) + tok_hi
            # Tiles below every row's limit need neither load masks nor a score mask.
            full_hi = tl.min(tl.where(row_ok, row_hi, tok_hi), axis=0)
            n_full = tok_lo + tl.maximum(full_hi - tok_lo, 0) // BLOCK_N * BLOCK_N

            q_row = token.to(tl.int64) * stride_q_tok + head.to(tl.int64) * stride_q_head
            q_nope = tl.load(
                q_ptr + q_row[:, None] + offs_v[None, :], mask=row_ok[:, None], other=0.0
            )
            q_rope = tl.load(
                q_ptr + q_row[:, None] + D_V + offs_r[None, :], mask=row_ok[:, None], other=0.0
            )
            if F16_TILE:
                q_nope = q_nope.to(tl.float16)
                q_rope = q_rope.to(tl.float16)
            else:
                q_nope = operand(q_nope, DOT_T, QK_FP8)
                q_rope = operand(q_rope, DOT_T, QK_FP8)

            m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
            acc = tl.zeros([BLOCK_M, D_V], dtype=tl.float32)

            if PAGE_SIZE >= BLOCK_N:
                # The page id of the next tile is read one iteration ahead, so the KV loads
                # do not hang on a load of the same iteration (the pipeliner then gives them
                # every stage instead of splitting the stages along the indirection).
                last_page = tl.maximum(num_pages - 1, 0)
                has_pages = num_pages > 0
                page = tl.load(
                    kv_indices_ptr + page_begin + tl.minimum(tok_lo // PAGE_SIZE, last_page),
                    mask=has_pages,
                    other=0,
                )
                if REG_PREFETCH:
                    # The tile of the next iteration is loaded into registers by hand (the
                    # pipeliner leaves loads whose e4m3 values are converted before the dots
                    # unpipelined): one tile of look-ahead.
                    kv_base = tile_ptr(
                        kv_ptr, page, tok_lo, stride_kv_block, stride_kv_slot, PAGE_SIZE
                    )
                    any_full = n_full > tok_lo
                    kv_next = tl.load(kv_base + tile_kv_offs, mask=any_full, other=0.0)
                    rope_next = tl.load(kv_base + tile_rope_offs, mask=any_full, other=0.0)
                    next_page = tl.minimum((tok_lo + BLOCK_N) // PAGE_SIZE, last_page)
                    page = tl.load(kv_indices_ptr + page_begin + next_page, mask=has_pages, other=0)
                    for n0 in range(tok_lo, n_full, BLOCK_N):
                        kv = kv_next
                        k_rope = rope_next
                        n1 = n0 + BLOCK_N
                        kv_base = tile_ptr(
                            kv_ptr, page, n1, stride_kv_block, stride_kv_slot, PAGE_SIZE
                        )
                        more = n1 < n_full
                        kv_next = tl.load(kv_base + tile_kv_offs, mask=more, other=0.0)
                        rope_next = tl.load(kv_base + tile_rope_offs, mask=more, other=0.0)
                        next_page = tl.minimum((n1 + BLOCK_N) // PAGE_SIZE, last_page)
                        page = tl.load(
                            kv_indices_ptr + page_begin + next_page, mask=has_pages, other=0
                        )
                        acc, m_i, l_i = attend(
                            acc, m_i, l_i, q_nope, q_rope, kv, k_rope, n0 + offs_n, row_hi,
                            score_scale, MASKED=False, DOT_T=DOT_T, QK_FP8=QK_FP8, P_FP8=P_FP8,
                            V_F16=V_F16, F16_TILE=F16_TILE, ABLATE=ABLATE,
                        )  # fmt: skip
                else:
                    for n0 in range(tok_lo, n_full, BLOCK_N):
                        kv_base = tile_ptr(
                            kv_ptr, page, n0, stride_kv_block, stride_kv_slot, PAGE_SIZE
                        )
                        next_page = tl.minimum((n0 + BLOCK_N) // PAGE_SIZE, last_page)
                        page = tl.load(
                            kv_indices_ptr + page_begin + next_page, mask=has_pages, other=0
                        )
                        acc, m_i, l_i = load_attend(
                            acc, m_i, l_i, q_nope, q_rope, kv_base, tile_kv_offs, tile_rope_offs,
                            n0 + offs_n, tok_hi, row_hi, score_scale, False, DOT_T, QK_FP8, P_FP8,
                            V_F16, F16_TILE, ABLATE,
                        )  # fmt: skip
                for n0 in tl.range(n_full, tok_hi, BLOCK_N, num_stages=1):
                    page = tl.load(kv_indices_ptr + page_begin + n0 // PAGE_SIZE)
                    kv_base = tile_ptr(kv_ptr, page, n0, stride_kv_block, stride_kv_slot, PAGE_SIZE)
                    acc, m_i, l_i = load_attend(
                        acc, m_i, l_i, q_nope, q_rope, kv_base, tile_kv_offs, tile_rope_offs,
                        n0 + offs_n, tok_hi, row_hi, score_scale, True, DOT_T, QK_FP8, P_FP8,
                        V_F16, F16_TILE, ABLATE,
                    )  # fmt: skip
            else:
                # Pages smaller than a tile: one page lookup per token, every tile masked.
                for n0 in range(tok_lo, tok_hi, BLOCK_N):
                    pos = n0 + offs_n
                    page = tl.load(
                        kv_indices_ptr + page_begin + pos // PAGE_SIZE, mask=pos < tok_hi, other=0
                    )
                    kv_row = page.to(tl.int64) * stride_kv_block + (
                        (pos % PAGE_SIZE).to(tl.int64) * stride_kv_slot
                    )
                    acc, m_i, l_i = load_attend(
                        acc, m_i, l_i, q_nope, q_rope, kv_ptr, kv_row[:, None] + offs_v[None, :],
                        kv_row[:, None] + D_V + offs_r[None, :], pos, tok_hi, row_hi, score_scale,
                        True, DOT_T, QK_FP8, P_FP8, V_F16, F16_TILE, ABLATE,
                    )  # fmt: skip

            seen = l_i > 0.0
            inv_l = tl.where(seen, kv_scale / tl.where(seen, l_i, 1.0), 0.0)
            o = acc * inv_l[:, None]
            lse = tl.where(
                seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) / 1.4426950408889634, float("-inf")
            )
            if partial_loc < 0:
                store_rows(
                    out_ptr, lse_ptr, o, lse, token, head, offs_v, row_ok, stride_o_tok,
                    stride_o_head, stride_lse_tok, stride_lse_head,
                )  # fmt: skip
            else:
                prow = (partial_loc + vrow - qo_start).to(tl.int64)
                phead = (part_head + head_local).to(tl.int64)
                po_row = prow * stride_po_row + phead * stride_po_head
                tl.store(part_o_ptr + po_row[:, None] + offs_v[None, :], o, mask=row_ok[:, None])
                pl_off = prow * stride_pl_row + phead * stride_pl_head
                tl.store(part_lse_ptr + pl_off, lse, mask=row_ok)
