"""Which analyses apply to a model, and why not: one home for the reasons (raised as NotApplicable).

The seed-000 key split ``LN(W_E[t] + W_pos[i])`` (its TV distance, the positional kernels of a
query token and their categories, Gibson's code variant) needs a position vector added to the
token embedding before layer 0. Rotary models (GPT-NeoX/Pythia, Llama, Qwen2) add none; position
enters only as a rotation of queries and keys inside attention. Those analyses raise
:class:`NotApplicable` with :func:`learned_positions`'s reason there — the command line prints it
as one line, a report records ``{"not_applicable": reason}`` for the stage and goes on. Rotary
models have their own split (:mod:`headscope.layer0.rotary_split`: the relative kernel of
:mod:`headscope.layer0.relative` × a content factor), on which the denominators, calibration,
contextual circuit and neuron scan run. The contextual *neurons* also need MLP0 to read layer-0
attention's output, which a parallel residual (GPT-NeoX) does not: :func:`mlp_reads_attention`.
"""

from __future__ import annotations

from .._errors import NotApplicable
from .config import Config

#: family → its name in messages
NAMES = {"gpt2": "GPT-2", "gpt_neo": "GPT-Neo", "gpt_neox": "GPT-NeoX (Pythia)", "opt": "OPT",
         "llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral", "gptj": "GPT-J", "gemma2": "Gemma 2",
         "olmo2": "OLMo 2", "phi3": "Phi-3"}


def learned_positions(cfg: Config, analysis: str) -> None:
    """Refuse `analysis` on a model without a learned position table added to the embedding."""
    if cfg.positional == "learned" and not cfg.pre_norms:
        raise NotApplicable(
            f"{analysis} are written for keys LN1(W_E[t] + W_pos[i]); {NAMES.get(cfg.family, cfg.family)} is post-LN "
            "(OPT-350m): layer 0 reads W_E[t] + W_pos[i] without a norm and LN1 follows the residual add")
    if cfg.positional != "learned":
        raise NotApplicable(
            f"{analysis} needs learned absolute positions added to the token embedding (W_pos); "
            f"{NAMES.get(cfg.family, cfg.family)} is a rotary model: positions rotate queries and keys inside "
            "attention, so there is no W_pos to split off (see the relative-position kernel instead)")


def mlp_reads_attention(cfg: Config, analysis: str) -> None:
    """Refuse `analysis` (layer-0 heads → MLP0 neurons) when MLP0 does not read layer 0's attention output."""
    if cfg.parallel_residual:
        raise NotApplicable(
            f"{analysis} needs MLP0 to read layer-0 attention's output; {NAMES.get(cfg.family, cfg.family)} has a "
            "parallel residual (MLP0 reads the block's input x, not x + attention), so no layer-0 head reaches an "
            "MLP0 neuron (the contextual circuit itself applies: `headscope neurons --fidelity`)")
    if cfg.branch_norms:
        raise NotApplicable(
            f"{analysis} predicts MLP0's input as the embedding plus the layer-0 heads' outputs; "
            f"{NAMES.get(cfg.family, cfg.family)} RMS-normalises attention's output as a whole before adding it "
            "(a post-attention norm), so no head's contribution to MLP0 is linear in its own output")


def weight_circuits(cfg: Config, analysis: str) -> None:
    """Refuse `analysis` — one that reads a head's QK circuit as the fixed bilinear form
    x̂ W_Q W_Kᵀ ŷᵀ of effective embeddings x̂ = N₁(x), or its OV circuit as the linear map x̂ W_OV —
    on a model where no such fixed form exists (OLMo 2), with the exact reason."""
    reasons = []
    if cfg.qk_norm:
        reasons.append("queries and keys are RMS-normalised over all heads of their position (QK-norm: "
                       "q = N(x W_Q) ⊙ w_q, k = N(x W_K) ⊙ w_k), so a score is x W_Q W_Kᵀ yᵀ divided by two "
                       "token-dependent norms, not a fixed bilinear form")
    if cfg.post_ln:
        reasons.append("every LayerNorm follows a residual add (post-LN): heads read the un-normalised sum of the "
                       "stream and their outputs are normalised together with it before anything reads them, so no "
                       "effective embedding N₁(x) exists and a head's effect is not linear in its OV weights")
    elif not cfg.pre_norms:
        reasons.append("attention and MLP read the un-normalised residual stream and each branch's output is "
                       "RMS-normalised as a whole before it is added, so no effective embedding N₁(x) exists and "
                       "a head's output is not linear in its OV weights")
    if reasons:
        raise NotApplicable(f"{analysis} needs fixed QK and OV circuits; in {NAMES.get(cfg.family, cfg.family)} "
                            + "; ".join(reasons))


def softcap_caveat(cfg: Config) -> str | None:
    """What soft-capping (Gemma 2) does to weight-based readings, in one sentence; None without it.

    The forward pass applies the caps exactly. Weight-based analyses read the bilinear form
    s = x W_QK yᵀ / divisor and the direct logits x W_U: both are the scores and logits *before* the
    caps. c·tanh(·/c) is strictly increasing, so every ranking (which key a query prefers, which
    token a direction promotes, signs) is exact; magnitudes are not: a capped score differs from s by
    less than |s|³/(3c²), so probabilities computed by softmax of uncapped scores (the relative
    kernel, any "attention from weights") are approximations that hold while |s| ≪ c."""
    parts = []
    if cfg.attn_softcap is not None:
        parts.append(f"attention scores are soft-capped at {cfg.attn_softcap:g} (c·tanh(s/c))")
    if cfg.final_softcap is not None:
        parts.append(f"final logits are soft-capped at {cfg.final_softcap:g}")
    if not parts:
        return None
    return ("; ".join(parts) + ": weight-based scores and logits are the uncapped ones — orderings and signs exact, "
            "probabilities from them approximate (error < |s|³/3c² per score)")


def branch_norm_caveat(cfg: Config) -> str | None:
    """What a post-attention norm (Gemma 2) leaves approximate in the OV readings, in one sentence; None without.

    Head h adds z_h (W_O[h] ⊙ w_post) / σ to the residual stream, σ = rms(Σ_h z_h W_O[h] + b_O) at that position
    (:func:`headscope.core.weights.written_W_O`). Scale-free readings (composition scores, copying scores,
    eigenvalue signs, singular directions, rankings) are exact per head; magnitudes (direct logit attribution)
    are those at σ = 1, the same factor for every head of a layer at a position."""
    if not cfg.branch_norms:
        return None
    return ("post-attention norm: head h writes z_h (W_O[h] ⊙ w_post) / σ, σ = rms(Σ_h z_h W_O[h] + b_O) at each "
            "position, one scale shared by every head of the layer; OV, composition and DLA read W_O ⊙ w_post, so "
            "ratios, signs, rankings and composition/copying scores are exact per head and DLA magnitudes are those "
            "at σ = 1 (the same factor for every head of a layer)")


def rotary_split(cfg: Config, analysis: str) -> None:
    """Refuse `analysis` (the rotary layer-0 split of :mod:`headscope.layer0.rotary_split`) on a model where
    its premises fail: layer 0's queries and keys are x̂_t W_Q, x̂_t W_K of x̂_t = N₁(W_E[t]), and a score is
    the fixed bilinear rot(q, Δ)·k / divisor, additive in κ and the content term."""
    name = NAMES.get(cfg.family, cfg.family)
    if cfg.qk_norm:
        raise NotApplicable(
            f"{analysis} reads layer-0 queries and keys as N₁(W_E[t]) W_Q, N₁(W_E[t]) W_K; {name} RMS-normalises q and "
            "k over all heads (QK-norm), so a key is not the mean key plus a content term shared by every head")
    if not cfg.pre_norms:
        raise NotApplicable(
            f"{analysis} reads layer-0 queries and keys through the first norm N₁(W_E[t]); {name} has no norm before "
            "attention")
    if cfg.attn_softcap is not None:
        raise NotApplicable(
            f"{analysis} splits a layer-0 score additively into the relative kernel κ(Δ) and a content term; {name} "
            f"soft-caps scores (c·tanh(s/c), c = {cfg.attn_softcap:g}), which is not additive, so the denominators' "
            "split into Z · S does not hold")

