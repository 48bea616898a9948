"""One KV tile of the decode's online softmax (Triton device functions, inlined by Triton).

`attend` is the step every loop of the decode kernel runs: QK over the latent and rope
blocks, the exp2 softmax update, PV with the latent block as V. `tile_ptr` and `load_tile`
address and load one tile of a page; `load_attend` loads a tile and attends to it;
`store_rows` writes final output rows (the decode's unsplit works and the reduce).
`interpreted` tells whether these were decorated under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import triton
import triton.language as tl


def interpreted() -> bool:
    """Whether the kernels were decorated under ``TRITON_INTERPRET=1`` (CPU interpreter)."""
    return type(attend).__name__ == "InterpretedFunction"


@triton.jit
def operand(x, DOT_T: tl.constexpr, KEEP_FP8: tl.constexpr):
    """A dot operand: kept as loaded (fp8 tensor-core path) or via bf16 to ``DOT_T``."""
    if KEEP_FP8:
        return x
    else:
        return x.to(tl.bfloat16).to(DOT_T)


@triton.jit
def load_tile(kv_base, kv_offs, rope_offs, pos, tok_hi, MASKED: tl.constexpr):
    """A KV tile: its ``[BLOCK_N, 512]`` latent block (Kᵀ and V) and ``[BLOCK_N, 64]`` rope."""
    if MASKED:
        pos_ok = pos < tok_hi
        kv = tl.load(kv_base + kv_offs, mask=pos_ok[:, None], other=0.0)
        k_rope = tl.load(kv_base + rope_offs, mask=pos_ok[:, None], other=0.0)
    else:
        kv = tl.load(kv_base + kv_offs)
        k_rope = tl.load(kv_base + rope_offs)
    return kv, k_rope


@triton.jit
def tile_ptr(kv_ptr, page, n0, stride_kv_block, stride_kv_slot, PAGE_SIZE: tl.constexpr):
    """Base pointer of the tile that starts at token `n0`, which lies in page `page`."""
    return kv_ptr + page.to(tl.int64) * stride_kv_block + (n0 % PAGE_SIZE) * stride_kv_slot


@triton.jit
def attend(
    acc,
    m_i,
    l_i,
    q_nope,
    q_rope,
    kv,
    k_rope,
    pos,
    row_hi,
    score_scale,
    MASKED: tl.constexpr,
    DOT_T: tl.constexpr,
    QK_FP8: tl.constexpr,
    P_FP8: tl.constexpr,
    V_F16: tl.constexpr,
    F16_TILE: tl.constexpr,
    ABLATE: tl.constexpr,
):
    """One KV tile of the online softmax: QK (latent + rope), exp2 softmax update, PV.

    The latent block `kv` serves as Kᵀ and as V. Unmasked tiles (every token valid and
    visible to every row) skip the score mask.
    """
    if F16_TILE:
        # e4m3 tile to fp16 (exact): the mma.sync path (fewer than 64 rows) has no fp8
        # operands.
        kv = kv.to(tl.float16)
        k_rope = k_rope.to(tl.float16)
    if ABLATE == 2:  # timing probe only: no QK dot (the rope block is not read)
        scores = tl.zeros([q_nope.shape[0], kv.shape[0]], dtype=tl.float32)
    elif F16_TILE:
        scores = tl.dot(q_nope, tl.trans(kv))
        scores = tl.dot(q_rope, tl.trans(k_rope), scores)
    else:
        k_op = operand(kv, DOT_T, QK_FP8)
        scores = tl.dot(q_nope, tl.trans(k_op))
        scores = tl.dot(q_rope, tl.trans(operand(k_rope, DOT_T, QK_FP8)), scores)
    scores = scores * score_scale
    if MASKED:
        visible = pos[None, :] < row_hi[:, None]
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_ref = m_new
    alpha = tl.exp2(m_i - m_ref)
    p = tl.exp2(scores - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if P_FP8:
        p8 = p.to(tl.float8e4nv)  # AITER's fp8-q rule; ΣP unrounded
        if V_F16 or F16_TILE:
            p_op = p8.to(tl.float16)
        else:
            p_op = p8.to(DOT_T)
    else:
        p_op = p.to(tl.bfloat16).to(DOT_T)
    if F16_TILE:
        v_op = kv
    elif V_F16:
        # e4m3 V and e4m3-rounded P are exact in fp16: one cvt per two values, fp16 MMA.
        v_op = kv.to(tl.float16)
    else:
        v_op = operand(kv, DOT_T, False)
    acc = acc * alpha[:, None]
    if ABLATE != 1:  # ABLATE == 1, a timing probe only: no PV dot
        acc = tl.dot(p_op, v_op, acc)
    return acc, m_new, l_i


@triton.jit
def load_attend(
    acc, m_i, l_i, q_nope, q_rope, kv_base, kv_offs, rope_offs, pos, tok_hi, row_hi, score_scale,
    MASKED: tl.constexpr, DOT_T: tl.constexpr, QK_FP8: tl.constexpr, P_FP8: tl.constexpr,
    V_F16: tl.constexpr, F16_TILE: tl.constexpr, ABLATE: tl.constexpr,
):  # fmt: skip
    """`load_tile` then `attend`: one loaded KV tile of the online softmax."""
    kv, k_rope = load_tile(kv_base, kv_offs, rope_offs, pos, tok_hi, MASKED)
    return attend(
        acc, m_i, l_i, q_nope, q_rope, kv, k_rope, pos, row_hi, score_scale, MASKED=MASKED,
        DOT_T=DOT_T, QK_FP8=QK_FP8, P_FP8=P_FP8, V_F16=V_F16, F16_TILE=F16_TILE, ABLATE=ABLATE,
    )  # fmt: skip


@triton.jit
def store_rows(
    out_ptr, lse_ptr, o, lse, token, head, offs_v, mask, stride_o_tok, stride_o_head,
    stride_lse_tok, stride_lse_head,
):  # fmt: skip
    """Final rows at (`token`, `head`) where `mask`: O in the output's dtype, fp32 LSE."""
    o_row = token.to(tl.int64) * stride_o_tok + head.to(tl.int64) * stride_o_head
    tl.store(
        out_ptr + o_row[:, None] + offs_v[None, :],
        o.to(out_ptr.dtype.element_ty),
        mask=mask[:, None],
    )
    l_off = token.to(tl.int64) * stride_lse_tok + head.to(tl.int64) * stride_lse_head
    tl.store(lse_ptr + l_off, lse, mask=mask)
