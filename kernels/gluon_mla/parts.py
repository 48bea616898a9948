"""The parts the Gluon decodes are built from (`decode_kernel`, `ws_kernel`, `ws_loader`).

A block is ``BLOCK_M`` packed (q token x head) rows: `block_rows` unpacks them, `row_limit`
and `block_bounds` give the tokens they see; `slot_offsets` and `issue_tile` copy a KV tile
into shared memory with ``cp.async`` (one page lookup per token), `block_start` issues Q and
the first tiles of a block; `issue_scores` issues ``S = Q Kᵀ`` on ``wgmma``, `softmax_step`
is one tile of the online softmax, and `store_block` writes a block's final or partial rows.
`cta_barrier` and `cp_async` are Gluon's names of this Triton release.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, warpgroup_mma

BLOCK_M = gl.constexpr(64)
# Gluon is experimental and renames as it goes: Triton 3.6 has `thread_barrier` and
# `async_copy_global_to_shared`, 3.7 `barrier`, 3.9 `async_load` too (the arguments alike).
cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
cp_async = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@gluon.jit
def block_rows(
    m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, LAYOUT: gl.constexpr,
    ROWS: gl.constexpr = BLOCK_M,
):  # fmt: skip
    """The packed rows ``m0 .. m0 + ROWS - 1`` in `LAYOUT`: (in range, virtual row, local
    head, token, head)."""
    rows = m0 + gl.arange(0, ROWS, layout=LAYOUT)
    row_ok = rows < num_rows
    vrow = qo_start + rows // heads_per_work
    head_local = rows % heads_per_work
    token = (vrow // (fold_ratio * seq_q)) * seq_q + vrow % seq_q
    head = group * heads_per_work + head_local
    return row_ok, vrow, head_local, token, head


@gluon.jit
def row_limit(token, q_begin, q_len, kv_len, tok_hi, CAUSAL: gl.constexpr):
    """Tokens each row may see (exclusive end): the causal limit within the work's range."""
    if CAUSAL:
        hi = gl.minimum(kv_len - q_len + (token - q_begin) + 1, tok_hi)
    else:
        hi = gl.zeros_like(token) + tok_hi
    return hi


@gluon.jit
def slot_offsets(
    kv_indices_ptr, page_begin, n0, tok_hi, stride_kv_block, stride_kv_slot,
    BLOCK_N: gl.constexpr, PAGE_SIZE: gl.constexpr, LAYOUT: gl.constexpr,
):  # fmt: skip
    """Element offsets of the tile's cache rows (tokens ``n0 ...``) and which tokens exist."""
    pos = n0 + gl.arange(0, BLOCK_N, layout=LAYOUT)
    ok = pos < tok_hi
    page = gl.load(kv_indices_ptr + page_begin + pos // PAGE_SIZE, mask=ok, other=0)
    slot = page.to(gl.int64) * stride_kv_block + (pos % PAGE_SIZE).to(gl.int64) * stride_kv_slot
    return slot, ok


@gluon.jit
def issue_tile(kv_ptr, slot, ok, lat_buf, rope_buf, D_V: gl.constexpr, D_R: gl.constexpr,
                LOAD: gl.constexpr, COMMIT: gl.constexpr = True):  # fmt: skip
    """cp.async of one KV tile (latent and rope blocks) into its stage; missing tokens are 0.
    With `COMMIT` the copies close a ``cp.async`` group (waited for with ``wait_group``)."""
    cols_v = gl.arange(0, D_V, layout=gl.SliceLayout(0, LOAD))
    cols_r = gl.arange(0, D_R, layout=gl.SliceLayout(0, LOAD))
    base = kv_ptr + slot[:, None]
    cp_async(lat_buf, base + cols_v[None, :], mask=ok[:, None])
    cp_async(rope_buf, base + D_V + cols_r[None, :], mask=ok[:, None])
    if COMMIT:
        async_copy.commit_group()


WIDEN_ROWS = gl.constexpr(16)  # tokens of a tile widened at a time (16 values a thread at 8 warps)


@gluon.jit
def widen_v(stage, v_buf, BLOCK_N: gl.constexpr, D_V: gl.constexpr, V_T: gl.constexpr,
            WARPS: gl.constexpr):  # fmt: skip
    """The latent block of an e4m3 stage (``[BLOCK_N, D_V]``) into `v_buf` as `V_T` (exact),
    by `WARPS` warps."""
    WIDEN: gl.constexpr = gl.BlockedLayout([1, 16], [1, 32], [WARPS, 1], [1, 0])
    for c in gl.static_range(BLOCK_N // WIDEN_ROWS):
        chunk = stage.slice(c * WIDEN_ROWS, WIDEN_ROWS).load(WIDEN)
        v_buf.slice(c * WIDEN_ROWS, WIDEN_ROWS).store(chunk.to(V_T))


@gluon.jit
def issue_scores(q_lat, q_rope, lat_buf, rope_buf, S_LAYOUT: gl.constexpr, BLOCK_N: gl.constexpr):
    """Issue ``S = Q Kᵀ`` over the latent and rope blocks of a stage (asynchronous)."""
    s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, S_LAYOUT)
    s = warpgroup_mma(q_lat, lat_buf.permute((1, 0)), s, use_acc=False, is_async=True)
    return warpgroup_mma(q_rope, rope_buf.permute((1, 0)), s, is_async=True)


@gluon.jit
def softmax_step(s, m_i, l_cols, score_scale, pos, row_hi):
    """One tile of the online softmax: (P, the rescale of O, the new row max, ΣP per column).

    Scores of tokens at or past a row's limit are -inf; ΣP is kept per row and column and
    summed over the columns once at the end (`store_block`).
    """
    scores = s * score_scale
    visible = pos[None, :] < row_hi[:, None]
    scores = gl.where(visible, scores, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(scores, axis=1))
    m_ref = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_ref)
    p = gl.exp2(scores - m_ref[:, None])
    return p, alpha, m_new, l_cols * alpha[:, None] + p


@gluon.jit
def store_block(
    o, m_i, l_cols, kv_scale, m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group,
    partial_loc, part_head, out_ptr, lse_ptr, part_o_ptr, part_lse_ptr, stride_o_tok,
    stride_o_head, stride_lse_tok, stride_lse_head, stride_po_row, stride_po_head, stride_pl_row,
    stride_pl_head, D_V: gl.constexpr, O_L: gl.constexpr, WITH_LSE: gl.constexpr = True,
    ROWS: gl.constexpr = BLOCK_M,
):  # fmt: skip
    """A block's `ROWS` rows, normalised (times kv_scale): final O and LSE, or a partial's.
    `D_V` columns from `out_ptr` / `part_o_ptr` on; the LSE too with `WITH_LSE`."""
    O_ROW: gl.constexpr = gl.SliceLayout(1, O_L)
    o_cols = gl.arange(0, D_V, layout=gl.SliceLayout(0, O_L))
    l_i = gl.sum(l_cols, axis=1)

    seen = gl.convert_layout(l_i, O_ROW) > 0.0
    l_o = gl.convert_layout(l_i, O_ROW)
    m_o = gl.convert_layout(m_i, O_ROW)
    inv_l = gl.where(seen, kv_scale / gl.where(seen, l_o, 1.0), 0.0)
    out_o = o * inv_l[:, None]
    lse = gl.where(
        seen, (m_o + gl.log2(gl.where(seen, l_o, 1.0))) / 1.4426950408889634, float("-inf")
    )
    o_ok, o_vrow, o_head_local, o_token, o_head = block_rows(
        m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, O_ROW, ROWS
    )
    if partial_loc < 0:
        o_row = o_token.to(gl.int64) * stride_o_tok + o_head.to(gl.int64) * stride_o_head
        gl.store(
            out_ptr + o_row[:, None] + o_cols[None, :],
            out_o.to(out_ptr.dtype.element_ty),
            mask=o_ok[:, None],
        )
        if WITH_LSE:
            l_off = o_token.to(gl.int64) * stride_lse_tok + o_head.to(gl.int64) * stride_lse_head
            gl.store(lse_ptr + l_off, lse, mask=o_ok)
    else:
        prow = (partial_loc + o_vrow - qo_start).to(gl.int64)
        phead = (part_head + o_head_local).to(gl.int64)
        po_row = prow * stride_po_row + phead * stride_po_head
        gl.store(part_o_ptr + po_row[:, None] + o_cols[None, :], out_o, mask=o_ok[:, None])
        if WITH_LSE:
            gl.store(part_lse_ptr + prow * stride_pl_row + phead * stride_pl_head, lse, mask=o_ok)


@gluon.jit
def block_start(
    q_ptr, kv_ptr, kv_indices_ptr, q_lat, q_rope, kv_lat, kv_rope,
    m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group,
    q_begin, q_len, kv_len, page_begin, tok_lo, tok_hi,
    stride_q_tok, stride_q_head, stride_kv_block, stride_kv_slot,
    PAGE_SIZE: gl.constexpr, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    D_V: gl.constexpr, D_R: gl.constexpr, LOAD: gl.constexpr, S_ROW: gl.constexpr,
    ROWS: gl.constexpr = BLOCK_M,
):  # fmt: skip
    """A block's start: Q's `ROWS` rows and tiles 0 .. STAGES - 2 issued (``cp.async``, Q's
    group first).

    Returns each row's token limit (in `S_ROW`), the block's limit, its tile count, and the
    offsets and mask of tile STAGES - 1, the next to issue.
    """
    LOAD_ROW: gl.constexpr = gl.SliceLayout(1, LOAD)
    cols_v = gl.arange(0, D_V, layout=gl.SliceLayout(0, LOAD))
    cols_r = gl.arange(0, D_R, layout=gl.SliceLayout(0, LOAD))
    row_ok, _, _, token, head = block_rows(
        m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, LOAD_ROW, ROWS
    )
    q_row = token.to(gl.int64) * stride_q_tok + head.to(gl.int64) * stride_q_head
    q_base = q_ptr + q_row[:, None]
    cp_async(q_lat, q_base + cols_v[None, :], mask=row_ok[:, None])
    cp_async(q_rope, q_base + D_V + cols_r[None, :], mask=row_ok[:, None])
    async_copy.commit_group()
    row_hi_load = row_limit(token, q_begin, q_len, kv_len, tok_hi, CAUSAL)
    block_hi = gl.max(gl.where(row_ok, row_hi_load, tok_lo), axis=0)
    num_tiles = gl.cdiv(gl.maximum(block_hi - tok_lo, 0), BLOCK_N)

    _, _, _, s_token, _ = block_rows(
        m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, S_ROW, ROWS
    )
    row_hi = row_limit(s_token, q_begin, q_len, kv_len, tok_hi, CAUSAL)

    # Tiles 0 .. STAGES - 2 in flight (a tile past the end loads nothing).
    for t in gl.static_range(STAGES - 1):
        slot, ok = slot_offsets(
            kv_indices_ptr, page_begin, tok_lo + t * BLOCK_N, block_hi,
            stride_kv_block, stride_kv_slot, BLOCK_N, PAGE_SIZE, LOAD_ROW,
        )  # fmt: skip
        issue_tile(kv_ptr, slot, ok, kv_lat.index(t), kv_rope.index(t), D_V, D_R, LOAD)
    next_slot, next_ok = slot_offsets(
        kv_indices_ptr, page_begin, tok_lo + (STAGES - 1) * BLOCK_N, block_hi,
        stride_kv_block, stride_kv_slot, BLOCK_N, PAGE_SIZE, LOAD_ROW,
    )  # fmt: skip
    return row_hi, block_hi, num_tiles, next_slot, next_ok


@gluon.jit
def block_bounds(
    m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, q_begin, q_len, kv_len,
    tok_lo, tok_hi, CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, ROW: gl.constexpr,
):  # fmt: skip
    """(each row's token limit in `ROW`, the block's limit, its tile count)."""
    row_ok, _, _, token, _ = block_rows(
        m0, num_rows, qo_start, heads_per_work, fold_ratio, seq_q, group, ROW
    )
    row_hi = row_limit(token, q_begin, q_len, kv_len, tok_hi, CAUSAL)
    block_hi = gl.max(gl.where(row_ok, row_hi, tok_lo), axis=0)
    num_tiles = gl.cdiv(gl.maximum(block_hi - tok_lo, 0), BLOCK_N)
    return row_hi, block_hi, num_tiles
