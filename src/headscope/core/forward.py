"""A white-box GPT-2 forward pass that keeps the named intermediate tensors asked for.

Names follow TransformerLens (``blocks.{l}.attn.hook_pattern`` …) plus one of our own,
``blocks.{l}.attn.hook_denom``: the log of the softmax denominator of every query,
``logsumexp_k(score[q, k])`` over the causal keys, so that
``pattern[q, k] = exp(score[q, k] - denom[q])``.

Shapes: b = batch, p = position (query q / key k), h = head, e = d_head, d = d_model,
m = d_mlp, v = d_vocab.

===============================  ==============  ===========================================
name                             shape           meaning
===============================  ==============  ===========================================
hook_embed                       [b p d]         W_E[tokens]
hook_pos_embed                   [b p d]         W_pos[:p] (absent for rotary models)
blocks.l.hook_resid_pre          [b p d]         residual stream entering block l
blocks.l.ln1.hook_scale          [b p]           σ = sqrt(var + eps) of LayerNorm 1 (1 without pre-norms)
blocks.l.ln1.hook_normalized     [b p d]         LN1 output
blocks.l.attn.hook_q / _k / _v   [b p h e]       x @ W_Q[h] + b_Q[h] … (QK-normed with cfg.qk_norm; q, k rotated by position
                                                 in rotary models: scores = q·k/scale holds)
blocks.l.attn.hook_attn_scores   [b h q k]       q·k / attn_scale(l), −inf above the diagonal (float32
                                                 for float16/bfloat16 weights with reorder_and_upcast_attn);
                                                 soft-capped c·tanh(·/c) when cfg.attn_softcap (Gemma 2)
blocks.l.attn.hook_denom         [b h q]         logsumexp_k of the scores
blocks.l.attn.hook_pattern       [b h q k]       softmax_k of the scores
blocks.l.attn.hook_z             [b p h e]       Σ_k pattern · v
blocks.l.attn.hook_result        [b p h d]       z @ W_O[h]   (per head, no bias)
blocks.l.hook_attn_out           [b p d]         Σ_h result + b_O (then RMSNorm ⊙ ln1_post_w with
                                                 cfg.branch_norms: what the residual stream receives)
blocks.l.hook_resid_mid          [b p d]         resid_pre + attn_out, LN1 of it with cfg.post_ln (with a parallel residual
                                                 the MLP reads resid_pre, not this)
blocks.l.ln2.hook_scale          [b p]
blocks.l.ln2.hook_normalized     [b p d]
blocks.l.mlp.hook_pre            [b p m]         LN2 @ W_in + b_in
blocks.l.mlp.hook_post           [b p m]         act(pre)
blocks.l.hook_mlp_out            [b p d]
blocks.l.hook_resid_post         [b p d]
ln_final.hook_scale              [b p]
logits                           [b p v]         soft-capped when cfg.final_softcap (Gemma 2)
===============================  ==============  ===========================================
"""

from __future__ import annotations

import fnmatch
import math
import weakref
from typing import Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int

from .._errors import HeadscopeError, expected_got
from . import rotary
from .weights import Block, Weights

Tensor = torch.Tensor

BLOCK_NAMES = (
    "hook_resid_pre", "ln1.hook_scale", "ln1.hook_normalized",
    "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores", "attn.hook_denom",
    "attn.hook_pattern", "attn.hook_z", "attn.hook_result", "hook_attn_out", "hook_resid_mid",
    "ln2.hook_scale", "ln2.hook_normalized", "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out",
    "hook_resid_post",
)


def all_names(n_layers: int) -> list[str]:
    names = ["hook_embed", "hook_pos_embed"]
    names += [f"blocks.{l}.{n}" for l in range(n_layers) for n in BLOCK_NAMES]
    return names + ["ln_final.hook_scale", "logits"]


class Cache(dict):
    """Named tensors of one forward pass; ``cache["blocks.0.attn.hook_pattern"]``."""

    @property
    def logits(self) -> Tensor:
        return self["logits"]


def activation(name: str, x: Tensor) -> Tensor:
    """The MLP non-linearity, written as HF writes it."""
    if name == "gelu_new" or name == "gelu_pytorch_tanh":
        # 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))): HF's NewGELU formula, as one fused kernel
        return F.gelu(x, approximate="tanh")
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_fast":
        return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))
    if name == "quick_gelu":
        return x * torch.sigmoid(1.702 * x)
    if name == "relu":
        return F.relu(x)
    if name == "silu":                                   # x σ(x): Llama's and Qwen2's gate (SwiGLU)
        return F.silu(x)
    raise HeadscopeError(f"unsupported activation {name!r}")


def layer_norm(x: Float[Tensor, "... d"], w, b, eps: float) -> tuple[Tensor, Tensor]:
    """LN(x) = w ⊙ (x − mean x)/σ + b with σ = sqrt(mean((x − mean x)²) + eps). Returns (LN(x), σ)."""
    if w.dtype != x.dtype:                                                 # e.g. float64 activations
        dt = torch.promote_types(x.dtype, w.dtype)
        x, w, b = x.to(dt), w.to(dt), b.to(dt)
    # the kernel behind F.layer_norm (HF's own), which also returns 1/σ: one fused pass
    out, _, rstd = torch.native_layer_norm(x, x.shape[-1:], w, b, eps)     # rstd [... 1]
    return out, rstd.squeeze(-1).reciprocal()


def rms_norm(x: Float[Tensor, "... d"], w, eps: float) -> tuple[Tensor, Tensor]:
    """RMSNorm(x) = w ⊙ x / σ with σ = sqrt(mean(x²) + eps) (no centring, no bias; Llama, Qwen2),
    computed in float32 at least as transformers does. Returns (RMSNorm(x), σ)."""
    dt = torch.promote_types(torch.promote_types(x.dtype, w.dtype), torch.float32)
    xf = x.to(dt)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)                                    # [... 1]
    out = w.to(dt) * (xf * rstd).to(x.dtype).to(dt)
    return out.to(torch.promote_types(x.dtype, w.dtype)), rstd.squeeze(-1).reciprocal()


def reader_norm(x: Float[Tensor, "... d"], w, b, cfg) -> tuple[Tensor, Tensor]:
    """LN1/LN2 before attention and MLP: :func:`normalize`, or (x, 1) without pre-norms (OLMo 2)."""
    if not cfg.pre_norms:
        return x, torch.ones(x.shape[:-1], dtype=x.dtype, device=x.device)
    return normalize(x, w, b, cfg)


def normalize(x: Float[Tensor, "... d"], w, b, cfg) -> tuple[Tensor, Tensor]:
    """The model's norm before a reader: LayerNorm (w, b) or RMSNorm (w; b is zero) by ``cfg.norm``."""
    if cfg.norm == "rmsnorm":
        out, scale = rms_norm(x, w, cfg.ln_eps)
        return (out + b if bool(b.any()) else out), scale
    return layer_norm(x, w, b, cfg.ln_eps)


class _Keeper:
    """Decides which names are kept, and stores them."""

    def __init__(self, names: Iterable[str] | None, n_layers: int):
        universe = all_names(n_layers)
        if names is None:
            self.keep = set(universe)
        else:
            if isinstance(names, str):
                names = [names]
            self.keep = set()
            for pat in names:
                hits = fnmatch.filter(universe, pat)
                if not hits:
                    raise HeadscopeError(f"unknown cache name {pat!r} (see headscope.forward.all_names)")
                self.keep.update(hits)
        self.cache = Cache()
        self._rope: tuple[Tensor, Tensor] | None = None   # (cos, sin) [p rotary_dim] of rotary models

    def rope(self, p: int, cfg, like: Tensor) -> tuple[Tensor, Tensor]:
        """(cos, sin) [p rotary_dim] for positions 0..p−1, built once per forward pass."""
        if self._rope is None or self._rope[0].shape[0] != p:
            self._rope = rotary.cos_sin(torch.arange(p, device=like.device), cfg, like.dtype)
        return self._rope

    def wants(self, name: str) -> bool:
        return name in self.keep

    def pending(self) -> set[str]:
        """The kept names not produced yet: empty once the rest of the pass would be discarded."""
        return self.keep - self.cache.keys()

    def put(self, name: str, t: Tensor) -> None:
        if name in self.keep:
            self.cache[name] = t


#: Bytes of fused QKV matrices remembered between calls, all blocks together. Within the
#: budget, blocks (the first ones used, typically the early layers) keep theirs; the others
#: build theirs per call, so the memo never grows into a second copy of a large model's
#: attention weights (GPT-2 XL's would be 1.5 GB). The values are the same either way.
QKV_MEMO_BYTES = 256 * 2**20
_memo_bytes = 0


def _release_memo(n: int) -> None:
    global _memo_bytes
    _memo_bytes -= n


def _fused_qkv(block: Block) -> tuple[Tensor, Tensor]:
    """W_Q, W_K, W_V [h d e] side by side as one [d 3·h·e] matrix (and the biases [3·h·e]).

    Remembered on the block while :data:`QKV_MEMO_BYTES` allows; rebuilt if any of the six
    tensors was replaced or modified in place (tensor ``_version``), so edits to weights
    are seen.
    """
    global _memo_bytes
    parts = (block.W_Q, block.W_K, block.W_V, block.b_Q, block.b_K, block.b_V)
    key = tuple((id(t), t._version) for t in parts)
    memo = block.__dict__.get("_qkv_memo")
    if memo is not None and memo[0] == key:
        return memo[1], memo[2]
    block.__dict__.pop("_qkv_memo", None)  # a stale memo: its bytes return to the budget when freed
    h, d, e = block.W_Q.shape
    W_qkv = torch.cat([W.permute(1, 0, 2).reshape(d, h * e) for W in parts[:3]], 1)                       # [h d e] → [d 3he]
    b_qkv = torch.cat([bb.reshape(h * e) for bb in parts[3:]])                                              # [h e] → [3he]
    n = W_qkv.numel() * W_qkv.element_size()
    if _memo_bytes + n <= QKV_MEMO_BYTES:
        _memo_bytes += n
        weakref.finalize(W_qkv, _release_memo, n)
        block.__dict__["_qkv_memo"] = (key, W_qkv, b_qkv, parts)  # `parts` keeps the ids alive (no reuse)
    return W_qkv, b_qkv


#: bytes of the largest [b h p p] scores buffer a Weights keeps for its next forward pass, where the
#: scores and pattern are not kept (consumed by the values within the block): a fresh 100 MB buffer
#: (a 1024-token float64 window, 12 heads: the calibration's) costs ~45 ms of page faults, about
#: half its product; a kept one, none. The values are the same either way.
SCORES_SCRATCH_BYTES = 128 * 2**20


def _take_scratch(w: Weights, shape, dtype, device) -> tuple[Tensor | None, Tensor | None]:
    """(buffer, a [shape] view of it) from `w`'s kept scores buffer, or (None, None) when it has none
    that fits. Taken out of `w` while in use (dict.pop: another thread then allocates its own)."""
    buf = w.__dict__.pop("_scores_scratch", None)
    n = math.prod(shape)
    if buf is None or buf.dtype != dtype or buf.device != device or buf.numel() < n:
        if buf is not None:
            w.__dict__.setdefault("_scores_scratch", buf)
        return None, None
    return buf, buf[:n].view(shape)


def _give_scratch(w: Weights, buf: Tensor) -> None:
    """Keep `buf` (1-D) on `w` for the next pass, when it is within :data:`SCORES_SCRATCH_BYTES` and no
    smaller than the buffer kept."""
    if buf.numel() * buf.element_size() > SCORES_SCRATCH_BYTES:
        return
    cur = w.__dict__.get("_scores_scratch")
    if cur is None or cur.numel() < buf.numel():
        w.__dict__["_scores_scratch"] = buf


#: what block l's attention keeps after its q, k and v, when nothing after the pattern is asked for
_SCORE_NAMES = ("attn.hook_attn_scores", "attn.hook_denom", "attn.hook_pattern")
_QKV_NAMES = ("attn.hook_q", "attn.hook_k", "attn.hook_v")


def _qkv_parts(k: _Keeper, pre: str) -> tuple[int, int]:
    """The parts [lo, hi) of (q, k, v) the block must compute: all three while anything past the
    pattern (z, the output, later blocks) is pending; else q and k for scores, denominators or
    patterns, and whichever of q, k, v is kept by name (hook_k alone: k only)."""
    left = k.pending()
    scores = {pre + n for n in _SCORE_NAMES}
    qkv = [pre + n for n in _QKV_NAMES]
    if left - scores - set(qkv):
        return 0, 3
    need = [i for i, n in enumerate(qkv) if n in left or (i < 2 and left & scores)]
    return (need[0], need[-1] + 1) if need else (0, 0)


def _attention(block: Block, x: Tensor, l: int, w: Weights, k: _Keeper) -> Tensor | None:
    """Block l's attention output [b p d], or None when everything `k` asks for is kept by the
    pattern (no values mixed, no W_O: patterns alone cost the scores and the softmax) or by q, k
    and v themselves (no scores; only the columns of the parts kept: hook_k alone costs a third)."""
    cfg = w.cfg
    b_, p, d = x.shape
    h, e = cfg.n_heads, cfg.d_head
    pre = f"blocks.{l}."
    ln, scale = reader_norm(x, block.ln1_w, block.ln1_b, cfg)
    k.put(pre + "ln1.hook_scale", scale)
    k.put(pre + "ln1.hook_normalized", ln)
    lo, hi = _qkv_parts(k, pre)
    if lo == hi:                                             # everything asked for is kept
        return None
    W_qkv, b_qkv = _fused_qkv(block)                                                                        # [d 3he], [3he]
    he = h * e
    # the columns of the parts needed (q, k, v of a pass that goes on): the same values as of all three
    qkv = torch.addmm(b_qkv[lo * he:hi * he], ln.reshape(b_ * p, d), W_qkv[:, lo * he:hi * he])
    parts = [None] * lo + list(qkv.view(b_, p, hi - lo, h, e).unbind(2)) + [None] * (3 - hi)              # [b p h e] each
    q, key, v = parts
    if cfg.qk_norm:                       # OLMo 2: RMSNorm over all heads of a position, before rotary
        if q is not None:
            q = rms_norm(q.reshape(b_, p, he), block.q_norm_w.reshape(he), cfg.ln_eps)[0].view(b_, p, h, e)
        # keys expanded per query head: the mean square over h·e equals that over the stored kv·e
        if key is not None:
            key = rms_norm(key.reshape(b_, p, he), block.k_norm_w.reshape(he), cfg.ln_eps)[0].view(b_, p, h, e)
    if cfg.positional == "rotary":                            # q and k rotated by position (core/rotary.py)
        rope = k.rope(p, cfg, qkv)
        q, key = (None if t is None else rotary.rotate(t, *rope) for t in (q, key))
    k.put(pre + "attn.hook_q", q)
    k.put(pre + "attn.hook_k", key)
    k.put(pre + "attn.hook_v", v)
    if not k.pending():                                      # q, k or v was all that was left
        return None
    # scores and pattern consumed here (none of them kept): into `w`'s kept buffer, no fresh pages
    scratch = not any(k.wants(pre + n) for n in _SCORE_NAMES) and q.dtype == v.dtype
    buf, out = _take_scratch(w, (b_, h, p, p), q.dtype, q.device) if scratch else (None, None)
    scores = masked_scores(q, key, l, cfg, out=out)                                                         # [b h q k]
    k.put(pre + "attn.hook_attn_scores", scores)
    if k.wants(pre + "attn.hook_attn_scores") or k.wants(pre + "attn.hook_denom"):
        pattern = torch.softmax(scores, dim=-1)
    else:                                                    # the scores are not read again: softmax in place
        pattern = torch._softmax(scores, -1, False, out=scores)                                             # the same values
    if k.wants(pre + "attn.hook_denom"):
        # log Z = s_max − log p_max (p_max ≥ 1/n never underflows): no second exp pass
        s_max, at = scores.max(dim=-1, keepdim=True)                                                        # [b h q 1]
        k.put(pre + "attn.hook_denom", (s_max - pattern.gather(-1, at).log()).squeeze(-1))
    pattern = pattern.to(q.dtype)                             # v's dtype: q, k, v come from one product
    k.put(pre + "attn.hook_pattern", pattern)
    if not k.pending():                                      # the pattern was all that was left
        return None
    z = torch.matmul(pattern, v.transpose(1, 2)).transpose(1, 2)                                             # [b q h e]
    if scratch:
        _give_scratch(w, buf if buf is not None else scores.view(-1))
    del scores, pattern
    k.put(pre + "attn.hook_z", z)
    if k.wants(pre + "attn.hook_result"):
        # per-head outputs first; their sum over heads is then the attention output (no second matmul)
        r = torch.bmm(z.permute(2, 0, 1, 3).reshape(h, b_ * p, e), block.W_O)                               # [h bp d]
        k.put(pre + "attn.hook_result", r.view(h, b_, p, d).permute(1, 2, 0, 3))                            # [b p h d]
        return _branch_norm(r.sum(0).add_(block.b_O).view(b_, p, d), block.ln1_post_w, cfg)                 # [b p d]
    out = torch.addmm(block.b_O, z.reshape(b_ * p, h * e), block.W_O.reshape(h * e, d)).view(b_, p, d)     # [b p d]
    return _branch_norm(out, block.ln1_post_w, cfg)


def masked_scores(q: Float[Tensor, "b p h e"], key: Float[Tensor, "b p h e"], l: int, cfg, a: int = 0,
                  z: int | None = None, out: Tensor | None = None) -> Float[Tensor, "b h m k"]:
    """Block l's scores q·k / attn_scale(l) of the queries at positions a..z−1 against the keys
    0..z−1 (default: every position), soft-capped with ``cfg.attn_softcap`` (Gemma 2), −inf at
    the keys a query does not see (:meth:`Config.hidden_keys`: causal, local window); float32 for
    float16/bfloat16 q and k under ``cfg.reorder_and_upcast_attn`` (HF's upcast).

    The forward's own (``hook_attn_scores``, a = 0 and z = p). A causal block of rows needs keys
    0..z−1 only: the keys after z − 1 are −inf in every row. Its entries equal the full square's
    up to the last bit of the product (BLAS blocks columns by the matrix's width: on this
    machine's MKL a column of a narrower product can differ by an ulp of the score). `out`: a
    [b h m k] buffer of q's dtype to write the scores into (:func:`_take_scratch`)."""
    z = q.shape[1] if z is None else z
    if cfg.reorder_and_upcast_attn and q.dtype in (torch.float16, torch.bfloat16):
        q, key = q.float(), key.float()  # HF's upcast: scores and softmax in float32, pattern back in v's dtype
    if out is not None and q.dtype == out.dtype:               # into the caller's buffer [b h m k] (same values)
        scores = torch.matmul(q[:, a:z].transpose(1, 2), key[:, :z].permute(0, 2, 3, 1), out=out).div_(cfg.attn_scale(l))
    else:
        scores = torch.matmul(q[:, a:z].transpose(1, 2), key[:, :z].permute(0, 2, 3, 1)).div_(cfg.attn_scale(l))  # [b h m k]
    pos = torch.arange(z, device=q.device)
    above = cfg.hidden_keys(l, pos[a:, None], pos[None, :])    # [m k] causal; local layer: i − window < j ≤ i
    if cfg.attn_softcap is not None:                           # Gemma 2: c·tanh(s/c) before the mask
        scores = scores.div_(cfg.attn_softcap).tanh_().mul_(cfg.attn_softcap)
    return scores.masked_fill_(above, float("-inf"))                                                     # in place: fresh tensor


def _branch_norm(out: Tensor, w, cfg) -> Tensor:
    """A branch's output as added to the residual stream: RMSNorm(out) ⊙ w with branch norms
    (Gemma 2, OLMo 2; ``cfg.branch_norms``), else `out` itself."""
    return rms_norm(out, w, cfg.ln_eps)[0] if cfg.branch_norms else out


def mlp(block: Block, x: Float[Tensor, "... d"], cfg) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """MLP(x) = act(LN2(x) @ W_in + b_in) @ W_out + b_out for residual vectors x [... d]; gated
    (SwiGLU, ``cfg.gated_mlp``): post = act(LN2(x) @ W_gate + b_gate) ⊙ (LN2(x) @ W_in + b_in).

    Returns (out [... d], LN2(x) [... d], σ₂ [...], pre [... m], post [... m]); for a gated MLP
    ``pre`` is the gate's pre-activation; with branch norms (Gemma 2, OLMo 2) ``out`` is
    RMSNorm(post @ W_out + b_out) ⊙ ln2_post_w, what the block adds to the residual stream.
    """
    shape, d = x.shape[:-1], x.shape[-1]
    ln, scale = reader_norm(x, block.ln2_w, block.ln2_b, cfg)
    pre = mlp_pre(block, ln, cfg).reshape(-1, block.W_in.shape[1])                                          # [n m]
    if cfg.gated_mlp:
        post = activation(cfg.act_fn, pre) * torch.addmm(block.b_in, ln.reshape(-1, d), block.W_in)
    else:
        post = activation(cfg.act_fn, pre)
    out = _branch_norm(torch.addmm(block.b_out, post, block.W_out), block.ln2_post_w, cfg)                 # [n d]
    return out.view(*shape, d), ln, scale, pre.view(*shape, -1), post.view(*shape, -1)


def mlp_pre(block: Block, ln: Float[Tensor, "... d"], cfg) -> Float[Tensor, "... m"]:
    """The MLP's pre-activation (``mlp.hook_pre``) from LN2's output: ln @ W_in + b_in, or the gate's
    ln @ W_gate + b_gate for a gated MLP."""
    d = ln.shape[-1]
    W, b = (block.W_gate, block.b_gate) if cfg.gated_mlp else (block.W_in, block.b_in)
    return torch.addmm(b, ln.reshape(-1, d), W).view(*ln.shape[:-1], W.shape[1])                            # [... m]


def _mlp(block: Block, x: Tensor, l: int, w: Weights, k: _Keeper) -> Tensor:
    pre_ = f"blocks.{l}."
    out, ln, scale, pre, post = mlp(block, x, w.cfg)
    k.put(pre_ + "ln2.hook_scale", scale)
    k.put(pre_ + "ln2.hook_normalized", ln)
    k.put(pre_ + "mlp.hook_pre", pre)
    k.put(pre_ + "mlp.hook_post", post)
    return out


def _forward(w: Weights, tokens: Tensor, keeper: _Keeper, stop_at_layer: int | None) -> Iterator[None]:
    """The forward pass of `tokens` [b p] into `keeper`, one block per step (a generator: it
    yields after each block, so several batches can advance block by block together)."""
    cfg = w.cfg
    b_, p = tokens.shape
    emb = w.W_E[tokens]                                                                                      # [b p d]
    keeper.put("hook_embed", emb)
    if w.W_pos is not None:
        pos = w.W_pos[:p].unsqueeze(0).expand(b_, p, cfg.d_model)                                            # [b p d]
        keeper.put("hook_pos_embed", pos)
        # W_E[tokens] is a fresh gather: unless kept as hook_embed, the sum goes into it (the same values,
        # no second [b p d] buffer to allocate and fault in)
        x = emb + pos if keeper.wants("hook_embed") else emb.add_(pos)
    else:                                                      # rotary: positions enter inside attention only
        x = emb
    n = cfg.n_layers if stop_at_layer is None else stop_at_layer
    for l in range(n):
        if not keeper.pending():            # everything asked for is kept: the rest would be discarded
            return
        block = w.blocks[l]
        keeper.put(f"blocks.{l}.hook_resid_pre", x)
        attn_out = _attention(block, x, l, w, keeper)
        if attn_out is None:                # everything asked for is kept
            return
        keeper.put(f"blocks.{l}.hook_attn_out", attn_out)
        mid = x + attn_out
        if cfg.post_ln:                                        # OPT-350m: LN1 after the residual add
            mid = normalize(mid, block.ln1_w, block.ln1_b, cfg)[0]
        keeper.put(f"blocks.{l}.hook_resid_mid", mid)
        # parallel residual (GPT-NeoX): the MLP reads the block's input, not x + attention
        src = x if cfg.parallel_residual else mid
        left = keeper.pending()
        if not left:
            return
        if left <= {f"blocks.{l}.ln2.hook_scale", f"blocks.{l}.ln2.hook_normalized", f"blocks.{l}.mlp.hook_pre"}:
            ln, scale = reader_norm(src, block.ln2_w, block.ln2_b, cfg)   # all that is left: LN2 (and the
            keeper.put(f"blocks.{l}.ln2.hook_scale", scale)              # pre-activation), not the rest of the MLP
            keeper.put(f"blocks.{l}.ln2.hook_normalized", ln)
            if keeper.wants(f"blocks.{l}.mlp.hook_pre"):
                keeper.put(f"blocks.{l}.mlp.hook_pre", mlp_pre(block, ln, cfg))
            return
        mlp_out = _mlp(block, src, l, w, keeper)
        keeper.put(f"blocks.{l}.hook_mlp_out", mlp_out)
        x = mid + mlp_out
        if cfg.post_ln:                                        # and LN2 after the MLP's
            x = normalize(x, block.ln2_w, block.ln2_b, cfg)[0]
        keeper.put(f"blocks.{l}.hook_resid_post", x)
        del block, attn_out, mid, src, mlp_out
        yield
    if n < cfg.n_layers:
        return
    if cfg.final_ln:
        ln, scale = normalize(x, w.ln_final_w, w.ln_final_b, cfg)
        keeper.put("ln_final.hook_scale", scale)
    else:                                                      # post-LN OPT: the stream is normalised already
        ln = x
    if keeper.wants("logits"):
        logits = torch.mm(ln.reshape(b_ * p, -1), w.W_U).view(b_, p, -1)                                    # [b p v]
        if bool(w.b_U.any()):
            logits.add_(w.b_U)  # raw GPT-2 has b_U = 0: skip a pass over b·p·d_vocab floats
        if cfg.final_softcap is not None:                      # Gemma 2: c·tanh(logit/c)
            logits.div_(cfg.final_softcap).tanh_().mul_(cfg.final_softcap)
        keeper.put("logits", logits)


_DONE = object()


@torch.no_grad()
def advance_together(steps: Iterable[Iterator]) -> None:
    """Advance each generator in `steps` one step in turn, round after round, until all are done.

    The walk every layer-by-layer computation shares: when step k of each generator reads block k
    (a forward pass's batches, the passes of several prompt sets, the effective embeddings), round k
    reads block k for all of them while it is held, so under a block budget
    (:func:`headscope.core.checkpoint.block_budget`) each block is built once per walk, not once
    per pass. Each generator runs the very operations it runs alone: results do not change."""
    steps = list(steps)
    while steps:
        steps = [s for s in steps if next(s, _DONE) is not _DONE]


def _drops_blocks(blocks) -> bool:
    """Whether `blocks` may drop a block and rebuild it when read again (a store with a budget,
    :class:`headscope.core.checkpoint._LazyBlocks`, possibly under a copy's replacements)."""
    return getattr(getattr(blocks, "base", blocks), "budget", None) is not None


def check_tokens(tokens, cfg) -> Tensor:
    tokens = torch.as_tensor(tokens)
    if tokens.dim() == 1:
        tokens = tokens.unsqueeze(0)                                                                         # [p] → [1 p]
    if tokens.dim() != 2:
        raise HeadscopeError(expected_got("tokens shape", "[batch pos]", list(tokens.shape)))
    if tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise HeadscopeError(expected_got("tokens dtype", "an integer dtype", tokens.dtype))
    if tokens.shape[1] == 0:
        raise HeadscopeError("tokens: empty sequence")
    if tokens.shape[1] > cfg.n_ctx:
        raise HeadscopeError(expected_got("sequence length (n_ctx)", f"≤ {cfg.n_ctx}", tokens.shape[1]))
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= cfg.d_vocab):
        raise HeadscopeError(f"token ids must lie in [0, {cfg.d_vocab}), got {int(tokens.min())}..{int(tokens.max())}")
    return tokens.long()


@torch.no_grad()
def run_with_cache(
    weights: Weights,
    tokens: Int[Tensor, "batch pos"],
    names: Iterable[str] | str | None = None,
    *,
    batch_size: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    stop_at_layer: int | None = None,
    keep_device: bool = False,
) -> Cache:
    """Run GPT-2 on `tokens` and return the named tensors asked for.

    ``names`` is a list of exact names or shell-style patterns
    (``"blocks.*.attn.hook_pattern"``); ``None`` keeps everything (costly: the
    per-head ``hook_result`` alone is b·p·h·d floats per layer), ``[]`` keeps
    nothing but logits if asked by name. ``batch_size`` chunks the batch; tensors are
    returned on the CPU unless ``keep_device``. ``stop_at_layer=L`` runs blocks
    ``0..L-1`` only (no logits).
    """
    return run_with_caches(weights, [tokens], names, batch_size=batch_size, device=device, dtype=dtype,
                           stop_at_layer=stop_at_layer, keep_device=keep_device)[0]


@torch.no_grad()
def run_with_caches(
    weights: Weights,
    token_sets: Sequence[Int[Tensor, "batch pos"]],
    names: Iterable[str] | str | None = None,
    *,
    batch_size: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    stop_at_layer: int | None = None,
    keep_device: bool = False,
) -> list[Cache]:
    """:func:`run_with_cache` of each token set (lengths may differ), the same caches.

    When the blocks are held within a budget, every batch of every set advances block by block
    together (:func:`advance_together`): each block is built once for all of them, not once per set."""
    w = weights
    if (device is not None and torch.device(device) != w.device) or (dtype is not None and dtype != w.dtype):
        w = w.to(device=device, dtype=dtype)
    passes = [ForwardPass(w, t, names, batch_size=batch_size, stop_at_layer=stop_at_layer) for t in token_sets]
    if sum(len(p.steps) for p in passes) > 1 and _drops_blocks(w.blocks):
        # blocks held within a budget: the batches advance together, block l read by each in turn
        # (built once per walk, not once per batch or set); every batch's operations are the same
        advance_together(s for p in passes for s in p.steps)
    else:
        for p in passes:
            for step, keeper in zip(p.steps, p.keepers):
                for _ in step:
                    pass
                if not keep_device:
                    keeper.cache = Cache({k: v.cpu() for k, v in keeper.cache.items()})
    return [p.cache(keep_device) for p in passes]


class ForwardPass:
    """The forward pass of `tokens` [b p] (in batches of `batch_size`) as steps to advance:
    ``steps[i]`` runs batch i one block per step (a generator; :func:`advance_together` walks
    them with others), :meth:`cache` gathers what was kept once every step is done."""

    def __init__(self, weights: Weights, tokens: Int[Tensor, "batch pos"], names: Iterable[str] | str | None = None,
                 *, batch_size: int | None = None, stop_at_layer: int | None = None):
        cfg = weights.cfg
        tokens = check_tokens(tokens, cfg)
        if stop_at_layer is not None and not 0 <= stop_at_layer <= cfg.n_layers:
            raise HeadscopeError(expected_got("stop_at_layer", f"0..{cfg.n_layers}", stop_at_layer))
        chunks = [tokens] if not batch_size else list(tokens.split(batch_size))
        self.keepers = [_Keeper(names, cfg.n_layers) for _ in chunks]
        self.steps = [_forward(weights, c.to(weights.device), k, stop_at_layer) for c, k in zip(chunks, self.keepers)]

    def cache(self, keep_device: bool = False) -> Cache:
        parts: list[Cache] = []
        for keeper in self.keepers:
            if not keep_device:
                keeper.cache = Cache({k: v.cpu() for k, v in keeper.cache.items()})
            parts.append(keeper.cache)
        if len(parts) == 1:
            return parts[0]
        return Cache({k: torch.cat([c[k] for c in parts]) for k in parts[0]})
