"""Canonical GPT-2 weights in TransformerLens names and shapes, and their processing.

Convention, stated once: activations are row vectors and every matrix multiplies
from the right, ``x @ W``. So a head's query is ``q = x @ W_Q[h] + b_Q[h]`` and its
attention score is ``q · k`` with Q on the left and K on the right.

Shapes (jaxtyping style):

- ``W_E``   [d_vocab d_model]       token embedding
- ``W_pos`` [n_ctx d_model]         position embedding
- ``W_Q, W_K, W_V`` [head d_model d_head], ``b_Q, b_K, b_V`` [head d_head]
- ``W_O``   [head d_head d_model], ``b_O`` [d_model]
- ``W_in``  [d_model d_mlp], ``b_in`` [d_mlp], ``W_out`` [d_mlp d_model], ``b_out`` [d_model]
- ``ln1_w, ln1_b, ln2_w, ln2_b, ln_final_w, ln_final_b`` [d_model]
- ``W_U``   [d_model d_vocab], ``b_U`` [d_vocab]

Processing (each an explicit, recorded option; all exact up to float rounding):

- ``fold_ln``: LayerNorm is ``LN(x) = w ⊙ (x - mean x)/σ(x) + b``. A matrix W that
  reads LN(x) sees ``((x - mean)/σ) @ (diag(w) W) + b @ W``, so w is folded into the
  rows of W and b into the reader's bias; the LayerNorm keeps only centring and
  scaling (w = 1, b = 0).
- ``center_reading_weights`` (with fold_ln only; TransformerLens's ``fold_ln`` does it
  under ``center_weights=True``): what reads a LayerNorm's output reads a vector of 1⊥
  once the LN is folded, so the mean over d_model of each reader column is invisible;
  it is subtracted from W_Q, W_K, W_V, W_in (after folding, biases folded first) and
  W_U (after folding ln_final, before ``center_unembed``). Exact; it makes the
  processed tensors equal TransformerLens's (``Processing.default()``).
  ``Processing.default_uncentred()`` is the earlier default, without it.
- ``center_writing_weights``: every reader of the residual stream centres it first,
  so the mean over d_model of what W_E, W_pos, W_O, W_out, b_O and b_out write is
  invisible; it is subtracted.
- ``center_unembed``: softmax is unchanged by a constant added to every logit, so
  W_U and b_U lose their mean over the vocabulary (logits shift by a per-position
  constant; log-probabilities are unchanged).
- ``fold_value_biases``: attention patterns sum to one, so a head's value bias
  contributes the constant ``b_V[h] @ W_O[h]`` to the output; it is moved into b_O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Iterator

import torch
from jaxtyping import Float

from .._errors import HeadscopeError, expected_got
from .config import Config

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True)
class Processing:
    """Which exact rewrites were applied to the raw weights (recorded in results)."""

    fold_ln: bool = False
    center_writing_weights: bool = False
    center_unembed: bool = False
    fold_value_biases: bool = False
    center_reading_weights: bool = False

    @classmethod
    def default(cls) -> "Processing":
        """The processing the seed studies assume: TransformerLens' defaults, tensor for tensor."""
        return cls(True, True, True, True, True)

    @classmethod
    def default_uncentred(cls) -> "Processing":
        """headscope's earlier default: as :meth:`default` but W_Q, W_K, W_V, W_in, W_U keep their d_model mean."""
        return cls(True, True, True, True, False)

    @classmethod
    def none(cls) -> "Processing":
        return cls()

    def applicable(self, cfg: Config) -> "Processing":
        """The options of this processing that are exact for `cfg`'s family (the others dropped).

        Every option is exact under LayerNorm. Under RMSNorm (Llama, Qwen2) nothing is centred:
        the norm divides by the root mean square of x itself, so the mean over d_model of what is
        written to the residual stream is not invisible (``center_writing_weights`` would change
        the model), and the norm's output is not in 1⊥ (``center_reading_weights`` neither).
        ``fold_ln`` (the weight w folds into the readers; RMSNorm has no bias), ``center_unembed``
        (softmax ignores a constant per position) and ``fold_value_biases`` (patterns sum to one)
        stay exact. Final-logit soft-capping (Gemma 2) drops ``center_unembed`` too: c·tanh(l/c)
        is not invariant under adding a constant to every logit.
        """
        out = self
        if cfg.post_ln:
            # post-LN (OPT-350m): each LayerNorm follows a residual add and no reader normalises its own
            # input, so nothing folds into a reader and the embeddings' d_model mean reaches layer 0
            out = dataclasses.replace(out, fold_ln=False, center_reading_weights=False, center_writing_weights=False)
        if cfg.norm == "rmsnorm":
            out = dataclasses.replace(out, center_writing_weights=False, center_reading_weights=False)
        if cfg.final_softcap is not None:
            # c·tanh(l/c) is not shift-invariant: a constant added to every logit changes the probabilities
            out = dataclasses.replace(out, center_unembed=False)
        if cfg.branch_norms:
            # a branch norm divides the branch's whole output by its RMS: centring W_O/W_out changes it
            out = dataclasses.replace(out, center_writing_weights=False)
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def label(self) -> str:
        on = [k for k, v in self.to_dict().items() if v]
        return ",".join(on) if on else "raw"


@dataclasses.dataclass
class Block:
    """One transformer block: attention then MLP, each behind its LayerNorm."""

    ln1_w: Float[Tensor, "d_model"]
    ln1_b: Float[Tensor, "d_model"]
    W_Q: Float[Tensor, "head d_model d_head"]
    W_K: Float[Tensor, "head d_model d_head"]
    W_V: Float[Tensor, "head d_model d_head"]
    b_Q: Float[Tensor, "head d_head"]
    b_K: Float[Tensor, "head d_head"]
    b_V: Float[Tensor, "head d_head"]
    W_O: Float[Tensor, "head d_head d_model"]
    b_O: Float[Tensor, "d_model"]
    ln2_w: Float[Tensor, "d_model"]
    ln2_b: Float[Tensor, "d_model"]
    W_in: Float[Tensor, "d_model d_mlp"]
    b_in: Float[Tensor, "d_mlp"]
    W_out: Float[Tensor, "d_mlp d_model"]
    b_out: Float[Tensor, "d_model"]
    #: gated MLPs only (``cfg.gated_mlp``, SwiGLU): MLP(x) = (act(x @ W_gate + b_gate) ⊙ (x @ W_in + b_in)) @ W_out + b_out
    W_gate: Float[Tensor, "d_model d_mlp"] | None = None
    b_gate: Float[Tensor, "d_mlp"] | None = None
    #: branch norms only (``cfg.branch_norms``; Gemma 2, OLMo 2): the RMSNorm weights applied to the
    #: attention output and to the MLP output before each is added to the residual stream
    ln1_post_w: Float[Tensor, "d_model"] | None = None
    ln2_post_w: Float[Tensor, "d_model"] | None = None
    #: QK-norm only (``cfg.qk_norm``; OLMo 2): the RMSNorm weights of the queries and keys, per head
    #: (keys expanded like W_K); the norm is taken over all heads of a position together
    q_norm_w: Float[Tensor, "head d_head"] | None = None
    k_norm_w: Float[Tensor, "head d_head"] | None = None

    def shapes(self, cfg: Config) -> dict[str, tuple[int, ...]]:
        """Name → shape of every tensor this block holds under `cfg` (W_gate/b_gate only when gated)."""
        h, d, e, m = cfg.n_heads, cfg.d_model, cfg.d_head, cfg.d_mlp
        out = {
            "ln1_w": (d,), "ln1_b": (d,),
            "W_Q": (h, d, e), "W_K": (h, d, e), "W_V": (h, d, e),
            "b_Q": (h, e), "b_K": (h, e), "b_V": (h, e),
            "W_O": (h, e, d), "b_O": (d,),
            "ln2_w": (d,), "ln2_b": (d,),
            "W_in": (d, m), "b_in": (m,), "W_out": (m, d), "b_out": (d,),
        }
        if cfg.gated_mlp:
            out.update({"W_gate": (d, m), "b_gate": (m,)})
        if cfg.branch_norms:
            out.update({"ln1_post_w": (d,), "ln2_post_w": (d,)})
        if cfg.qk_norm:
            out.update({"q_norm_w": (h, e), "k_norm_w": (h, e)})
        return out


_BLOCK_FIELDS = tuple(f.name for f in dataclasses.fields(Block))


class ReplacedBlocks(Sequence):
    """`base`'s blocks with some replaced (``{layer: Block}``): a steered or null copy of a model
    shares every other block with it, read through `base` (which may drop and rebuild them,
    :class:`headscope.core.checkpoint._LazyBlocks`), never copied into a list that would hold them
    all. Pickles as the plain list."""

    def __init__(self, base: Sequence, replaced: dict[int, "Block"]):
        if isinstance(base, ReplacedBlocks):                     # one level: replacements merged
            base, replaced = base.base, {**base.replaced, **replaced}
        self.base, self.replaced = base, dict(replaced)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]
        return self.replaced[i] if i in self.replaced else self.base[i]

    def __reduce__(self):
        return list, (list(self),)

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None


def _block_origin(blocks: Sequence, i: int):
    """What identifies block `i` of `blocks` without building it: the replacement, or (store, i)."""
    if isinstance(blocks, ReplacedBlocks):
        if i in blocks.replaced:
            return blocks.replaced[i]
        blocks = blocks.base
    if isinstance(blocks, list):
        return blocks[i]
    return (blocks, i)


def same_block(a: Sequence, b: Sequence, i: int) -> bool:
    """Whether block `i` of `a` and of `b` is the very same block (the same object, or the same
    layer of the same store of blocks), read without building either."""
    x, y = _block_origin(a, i), _block_origin(b, i)
    if isinstance(x, tuple) and isinstance(y, tuple):
        return x[0] is y[0] and x[1] == y[1]
    return x is y


def is_transposed_view(W_U: Tensor, W_E: Tensor) -> bool:
    """W_U is literally ``W_E.T`` (same memory, transposed strides): GPT-2's tie, held once."""
    return (
        W_U.dim() == W_E.dim() == 2 and W_U.shape == W_E.T.shape and W_U.stride() == W_E.T.stride()
        and W_U.device == W_E.device and W_U.dtype == W_E.dtype and W_U.data_ptr() == W_E.data_ptr()
    )


@dataclasses.dataclass
class Weights:
    """All weights of a GPT-2 model plus the processing that produced them."""

    cfg: Config
    W_E: Float[Tensor, "d_vocab d_model"]
    W_pos: Float[Tensor, "n_ctx d_model"] | None      #: None for rotary models (cfg.positional == "rotary")
    blocks: list[Block]
    ln_final_w: Float[Tensor, "d_model"]
    ln_final_b: Float[Tensor, "d_model"]
    W_U: Float[Tensor, "d_model d_vocab"]
    b_U: Float[Tensor, "d_vocab"]
    processing: Processing = dataclasses.field(default_factory=Processing.none)

    # -- checks ---------------------------------------------------------------------

    def shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.cfg
        out = {"W_E": (c.d_vocab, c.d_model), "W_pos": (c.n_ctx, c.d_model)}
        if c.positional != "learned":
            del out["W_pos"]
        return out | {"ln_final_w": (c.d_model,), "ln_final_b": (c.d_model,),
                      "W_U": (c.d_model, c.d_vocab), "b_U": (c.d_vocab,)}

    def named_tensors(self) -> Iterator[tuple[str, Tensor]]:
        for name in self.shapes():
            yield name, getattr(self, name)
        for l, block in enumerate(self.blocks):
            for name in block.shapes(self.cfg):
                yield f"blocks.{l}.{name}", getattr(block, name)

    def validate(self) -> "Weights":
        """Assert every shape and that every weight is finite."""
        if len(self.blocks) != self.cfg.n_layers:
            raise HeadscopeError(expected_got("number of blocks", self.cfg.n_layers, len(self.blocks)))
        expected = dict(self.shapes())
        for l, block in enumerate(self.blocks):
            expected.update({f"blocks.{l}.{k}": v for k, v in block.shapes(self.cfg).items()})
        for name, t in self.named_tensors():
            if tuple(t.shape) != expected[name]:
                raise HeadscopeError(expected_got(f"shape of {name}", list(expected[name]), list(t.shape)))
            if not torch.isfinite(t).all():
                raise HeadscopeError(f"weight {name} contains NaN or Inf values")
        return self

    # -- conversions ----------------------------------------------------------------

    def map(self, fn) -> "Weights":
        """Apply `fn` to every tensor (e.g. a dtype or device move).

        A tied W_U held as a view of W_E (``W_E.T``) stays a view of the new W_E.
        """
        blocks = [Block(**{k: fn(getattr(b, k)) for k in b.shapes(self.cfg)}) for b in self.blocks]
        view = is_transposed_view(self.W_U, self.W_E)
        top = {k: fn(getattr(self, k)) for k in self.shapes() if not (view and k == "W_U")}
        if view:
            top["W_U"] = top["W_E"].T
        top.setdefault("W_pos", None)
        return Weights(cfg=self.cfg, blocks=blocks, processing=self.processing, **top)

    def with_blocks(self, replaced: dict[int, Block]) -> "Weights":
        """These weights with the blocks in `replaced` (layer → Block) swapped in; every other block
        is shared (:class:`ReplacedBlocks`: read through this model's blocks, not listed)."""
        return dataclasses.replace(self, blocks=ReplacedBlocks(self.blocks, replaced))

    def to(self, device=None, dtype=None) -> "Weights":
        return self.map(lambda t: t.to(device=device, dtype=dtype))

    @property
    def dtype(self) -> torch.dtype:
        return self.W_E.dtype

    @property
    def reads_centred(self) -> bool:
        """Whether every reader of the residual sees a vector of 1⊥ (fold_ln under LayerNorm: the
        norm only centres and scales); not under RMSNorm, which does not centre."""
        return self.processing.fold_ln and self.cfg.norm == "layernorm"

    @property
    def n_parameters(self) -> int:
        """Parameters of the GPT-2 these weights describe (W_U counted once when tied to W_E, b_U not)."""
        n = sum(t.numel() for name, t in self.named_tensors() if name not in ("W_U", "b_U"))
        return n + (0 if self.tied else self.W_U.numel())

    @property
    def tied(self) -> bool:
        """W_U is W_Eᵀ (GPT-2's tied unembedding; raw weights only, processing changes W_U)."""
        if is_transposed_view(self.W_U, self.W_E):
            return True
        return self.W_U.shape == self.W_E.T.shape and bool(torch.equal(self.W_U, self.W_E.T))

    def embedding_norms(self, chunk: int = 8192) -> tuple[Tensor, Tensor]:
        """(|W_E[t]| for every token [cfg.vocab: no padding rows], |W_pos[i]| for every position [n_ctx])."""
        V = self.cfg.vocab
        emb = torch.cat([self.W_E[i:min(i + chunk, V)].norm(dim=-1) for i in range(0, V, chunk)])
        return emb, (self.W_pos.norm(dim=-1) if self.W_pos is not None else torch.zeros(0, dtype=emb.dtype))

    @property
    def device(self) -> torch.device:
        return self.W_E.device


# -- processing ---------------------------------------------------------------------


def _center(t: Tensor, dim: int = -1) -> Tensor:
    return t - t.mean(dim=dim, keepdim=True)


def written_W_O(block: Block, cfg: Config) -> Float[Tensor, "head d_head d_model"]:
    """W_O as the residual stream receives it, up to one positive scale per position.

    With ``cfg.branch_norms`` (Gemma 2's post-attention norm) the branch output r = Σ_h z_h W_O[h] + b_O is
    RMS-normalised and scaled by ln1_post_w before it is added, so head h adds z_h (W_O[h] ⊙ w) / σ with
    σ = sqrt(mean r² + eps): one scalar per position, shared by every head of the layer (the forward's
    ``hook_result`` is z_h W_O[h], before the norm). Returns W_O[h] ⊙ ln1_post_w there, W_O otherwise; the
    OV, composition and direct-logit readings use it (:func:`headscope.core.applicability.branch_norm_caveat`
    says what σ leaves approximate)."""
    if not cfg.branch_norms or block.ln1_post_w is None:
        return block.W_O
    return block.W_O * block.ln1_post_w.to(block.W_O.dtype)


#: the block's matrices process_block(inplace=True) may rewrite in place (the biases stay out of place)
_INPLACE_FIELDS = ("W_Q", "W_K", "W_V", "W_in", "W_gate", "W_O", "W_out")


def _rewritable(block: Block) -> set[str]:
    """The fields of :data:`_INPLACE_FIELDS` that are contiguous and share their memory with no other
    field of `block`: rewriting them in place gives the bits the out-of-place ops give (same
    layout, same reduction order) and changes nothing else."""
    owners: dict[int, int] = {}
    for k in _BLOCK_FIELDS:
        t = getattr(block, k)
        if isinstance(t, Tensor):
            ptr = t.untyped_storage().data_ptr()
            owners[ptr] = owners.get(ptr, 0) + 1
    return {k for k in _INPLACE_FIELDS
            if (t := getattr(block, k)) is not None and t.is_contiguous()
            and owners[t.untyped_storage().data_ptr()] == 1}


def process_block(block: Block, processing: Processing, *, inplace: bool = False) -> Block:
    """One raw block under `processing` (fold_ln, centring of W_O/W_out/b_O/b_out, value biases).

    Returns a new :class:`Block`; `block` is left untouched, unless ``inplace``: then its
    matrices (contiguous, sharing memory with no other field) are rewritten in place instead of
    allocated anew — the same bits (for a caller that owns a fresh copy: GPT-2 small's 12 blocks
    in a quarter of the CPU time). Blocks are independent of one another, so processing them one
    at a time equals processing the whole model.
    """
    b = Block(**{k: getattr(block, k) for k in _BLOCK_FIELDS})
    own = _rewritable(b) if inplace else set()

    def scale(name: str, by: Tensor) -> None:
        t = getattr(b, name)
        setattr(b, name, t.mul_(by) if name in own and torch.result_type(t, by) == t.dtype else t * by)

    def center(name: str, dim: int) -> None:
        t = getattr(b, name)
        setattr(b, name, t.sub_(t.mean(dim=dim, keepdim=True)) if name in own else _center(t, dim=dim))

    if processing.fold_ln:
        # Q/K/V read LN1: b_X += ln1_b @ W_X[h] ; W_X[h] = diag(ln1_w) W_X[h]
        for X in ("Q", "K", "V"):
            W = getattr(b, f"W_{X}")                     # [head d_model d_head]
            bias = getattr(b, f"b_{X}")                  # [head d_head]
            setattr(b, f"b_{X}", bias + torch.einsum("d,hde->he", b.ln1_b, W))
            scale(f"W_{X}", b.ln1_w[None, :, None])
        b.b_in = b.b_in + b.ln2_b @ b.W_in
        scale("W_in", b.ln2_w[:, None])
        if b.W_gate is not None:                             # a gated MLP's gate reads LN2 too
            b.b_gate = b.b_gate + b.ln2_b @ b.W_gate
            scale("W_gate", b.ln2_w[:, None])
        if processing.center_reading_weights:                # readers of 1⊥: drop the d_model mean
            for X in ("Q", "K", "V"):
                center(f"W_{X}", 1)
            center("W_in", 0)
            if b.W_gate is not None:
                center("W_gate", 0)
        b.ln1_w, b.ln1_b = torch.ones_like(b.ln1_w), torch.zeros_like(b.ln1_b)
        b.ln2_w, b.ln2_b = torch.ones_like(b.ln2_w), torch.zeros_like(b.ln2_b)
    if processing.center_writing_weights:
        center("W_O", -1)
        b.b_O = _center(b.b_O)
        center("W_out", -1)
        b.b_out = _center(b.b_out)
    if processing.fold_value_biases:
        b.b_O = b.b_O + torch.einsum("he,hed->d", b.b_V, b.W_O)
        b.b_V = torch.zeros_like(b.b_V)
    return b


def process_embed(W_E: Tensor, W_pos: Tensor, processing: Processing, *,
                  inplace: bool = False) -> tuple[Tensor, Tensor]:
    """(W_E, W_pos) under `processing`: centred over d_model with center_writing_weights.

    ``inplace`` lets it overwrite the inputs instead of allocating new ones.
    """
    if processing.center_writing_weights:
        if inplace:
            W_E = W_E.sub_(W_E.mean(dim=-1, keepdim=True))
            return W_E, (W_pos.sub_(W_pos.mean(dim=-1, keepdim=True)) if W_pos is not None else None)
        return _center(W_E), (_center(W_pos) if W_pos is not None else None)
    return W_E, W_pos


def process_unembed(
    W_U: Tensor, b_U: Tensor, ln_final_w: Tensor, ln_final_b: Tensor, processing: Processing,
    vocab: int | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(W_U, b_U, ln_final_w, ln_final_b) under `processing` (fold_ln of ln_final, center_unembed).

    center_unembed subtracts the mean over the first `vocab` columns (``Config.vocab``: the tokens,
    not the padding rows of a padded vocabulary) from every column: a constant per position either
    way (exact), but one the padding rows cannot move.

    ``W_U`` may be a transposed view of ``W_E`` (GPT-2's tie); it is read, never
    written: the processed W_U is one new dense [d_model d_vocab] tensor, rewritten in
    place (a vocabulary-sized matrix is copied once, not once per rewrite).
    """
    if processing.fold_ln or processing.center_unembed:
        W_U = W_U.clone() if W_U.is_contiguous() else W_U.contiguous()
    if processing.fold_ln:
        b_U = b_U + ln_final_b @ W_U
        W_U.mul_(ln_final_w[:, None])
        if processing.center_reading_weights:
            W_U.sub_(W_U.mean(dim=0, keepdim=True))
        ln_final_w, ln_final_b = torch.ones_like(ln_final_w), torch.zeros_like(ln_final_b)
    if processing.center_unembed:
        n = W_U.shape[-1] if vocab is None else vocab
        W_U.sub_(W_U[:, :n].mean(dim=-1, keepdim=True))
        b_U = b_U - b_U[:n].mean()
    return W_U, b_U, ln_final_w, ln_final_b


def process(
    weights: Weights,
    processing: Processing | None = None,
) -> Weights:
    """Return processed weights; the raw ones are left untouched.

    Rewrites are applied to the raw weights in the fixed order fold_ln (with
    center_reading_weights), center_writing_weights, center_unembed, fold_value_biases (block by block:
    :func:`process_block`, :func:`process_embed`, :func:`process_unembed`). Asking for
    processing of already-processed weights is refused (results would record the
    wrong thing).
    """
    processing = processing or Processing.default()
    if processing.center_reading_weights and not processing.fold_ln:
        raise HeadscopeError("processing: center_reading_weights needs fold_ln (only a folded LayerNorm's "
                             "output lies in 1⊥, which makes the centring exact)")
    if weights.processing != Processing.none():
        raise HeadscopeError(
            f"weights are already processed ({weights.processing.label()}); process raw weights"
        )
    exact = processing.applicable(weights.cfg)
    if exact != processing:
        off = [k for k, v in processing.to_dict().items() if v and not exact.to_dict()[k]]
        raise HeadscopeError(f"processing: {', '.join(off)} would change a {weights.cfg.norm} model (not exact "
                             "there: Processing.applicable(cfg) gives the exact options)")
    W_E, W_pos = process_embed(weights.W_E, weights.W_pos, processing)
    W_U, b_U, ln_w, ln_b = process_unembed(weights.W_U, weights.b_U, weights.ln_final_w, weights.ln_final_b,
                                           processing, weights.cfg.vocab)
    blocks = [process_block(b, processing) for b in weights.blocks]
    # every tensor is a new one, as before: callers may modify the result in place
    fresh = lambda t, old: t.clone() if any(t is o for o in old) else t  # noqa: E731
    originals = [weights.W_E, weights.W_pos, weights.W_U, weights.b_U, weights.ln_final_w, weights.ln_final_b]
    for nb, ob in zip(blocks, weights.blocks):
        for k in _BLOCK_FIELDS:
            if getattr(nb, k) is not None:
                setattr(nb, k, fresh(getattr(nb, k), [getattr(ob, k)]))
    return Weights(
        cfg=weights.cfg, W_E=fresh(W_E, originals), W_pos=fresh(W_pos, originals) if W_pos is not None else None,
        blocks=blocks,
        ln_final_w=fresh(ln_w, originals), ln_final_b=fresh(ln_b, originals),
        W_U=fresh(W_U, originals), b_U=fresh(b_U, originals), processing=processing,
    )
