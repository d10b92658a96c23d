"""The composition scores' two exact paths (e × e cores; inner products of d × d Grams) against the
naive d × d definition in float64, against each other at GPT-2 small's widths, and their costs."""

from __future__ import annotations

import math

import pytest
import torch
from torch.overrides import TorchFunctionMode

from headscope.maps import composition as C
from headscope.core.config import Config
from headscope.core.weights import Block, Weights

EPS = torch.finfo(torch.float64).eps
Tensor = torch.Tensor


def _weights(seed: int, L=4, d=42, h=3, m=20, V=70, n_ctx=9, scales=False) -> Weights:
    """Random float64 weights (all dimensions distinct); `scales`: every head's four matrices times
    heavy-tailed factors (10^±k, k ≈ Cauchy, |k| ≤ 12)."""
    e = d // h
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731

    def sc(*s):
        x = r(*s)
        if scales:
            k = torch.tan(math.pi * (torch.rand(s[0], generator=g, dtype=torch.float64) - 0.5)).clamp(-12, 12)
            x = x * (10.0 ** k).view(-1, *[1] * (len(s) - 1))                            # [h …]: per head
        return x

    cfg = Config(n_layers=L, d_model=d, n_heads=h, d_mlp=m, d_vocab=V, n_ctx=n_ctx)
    blocks = [Block(ln1_w=r(d), ln1_b=r(d), W_Q=sc(h, d, e), W_K=sc(h, d, e), W_V=sc(h, d, e), b_Q=r(h, e),
                    b_K=r(h, e), b_V=r(h, e), W_O=sc(h, e, d), b_O=r(d), ln2_w=r(d), ln2_b=r(d), W_in=r(d, m),
                    b_in=r(m), W_out=r(m, d), b_out=r(d)) for _ in range(L)]
    return Weights(cfg=cfg, W_E=r(V, d), W_pos=r(n_ctx, d), blocks=blocks, ln_final_w=r(d), ln_final_b=r(d),
                   W_U=r(d, V), b_U=r(V))


def _naive(W: Weights) -> dict[str, Tensor]:
    """The definition: W_OV^A = W_V W_O and M_B [d d] formed, ‖W_OV^A M_B‖_F / (‖W_OV^A‖_F ‖M_B‖_F)."""
    L, H = W.cfg.n_layers, W.cfg.n_heads
    out = {m: torch.zeros(L, H, L, H, dtype=torch.float64) for m in C.MODES}
    unit = lambda X: X / X.flatten(-2).norm(dim=-1)[:, None, None]  # noqa: E731  [h d d] each of norm 1
    for la in range(L):
        a = W.blocks[la]
        left = unit(a.W_V @ a.W_O)                                                        # [hA d d]
        for lb in range(la + 1, L):
            b = W.blocks[lb]
            right = {"Q": b.W_Q @ b.W_K.mT, "K": b.W_K @ b.W_Q.mT, "V": b.W_V @ b.W_O}     # [hB d d] each
            for m in C.MODES:
                prod = torch.einsum("acd,bdf->abcf", left, unit(right[m]))               # [hA hB d d]
                out[m][la, :, lb, :] = prod.flatten(-2).norm(dim=-1)
    return out



@pytest.mark.parametrize("path", ["gram", "cores"])
@pytest.mark.parametrize("seed,scales", [(0, False), (1, True), (2, True), (3, True)])
def test_both_paths_equal_the_naive_definition(path, seed, scales):
    W = _weights(seed, scales=scales)
    got, ref = C.composition_scores(W, path=path), _naive(W)
    for m in C.MODES:
        assert torch.isfinite(got[m]).all() and (got[m] >= 0).all()
        torch.testing.assert_close(got[m], ref[m], rtol=1e-10, atol=0)
    assert not torch.allclose(got["Q"], got["K"])                         # the reader's two sides differ


def test_orthogonal_and_nearly_orthogonal_pairs_keep_the_cores_accuracy():
    """Head 0.1 writes only into a random 20-dimensional subspace S, head 0.2 into S plus a 1e-9 leak;
    head 2.2 reads (Q, K and V) only from S⊥. Head 0.1 → 2.2 is 0 in exact arithmetic, 0.2 → 2.2 about
    1e-9: both under the Gram path's noise floor τ = √(1.01·(d² + 2e)·ε), so its cores compute them,
    as accurate as the cores path (never NaN, negative, or the Gram's √ε rounding)."""
    W = _weights(4, L=3)
    d, e = W.cfg.d_model, W.cfg.d_head
    g = torch.Generator().manual_seed(5)
    Q = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]       # [d d] orthogonal
    S, perp = Q[:, :20], Q[:, 20:]                                                        # [d 20], [d 22]
    W.blocks[0].W_O[1] = torch.randn(e, 20, generator=g, dtype=torch.float64) @ S.T      # [e d] into S
    W.blocks[0].W_O[2] = torch.randn(e, 20, generator=g, dtype=torch.float64) @ S.T \
        + 1e-9 * torch.randn(e, d, generator=g, dtype=torch.float64)                     # and a leak
    for name in ("W_Q", "W_K", "W_V"):
        getattr(W.blocks[2], name)[2] = perp @ torch.randn(22, e, generator=g, dtype=torch.float64)  # reads S⊥
    tau = math.sqrt(1.01 * (d * d + 2 * e) * EPS)
    ref = _naive(W)
    gram, cores = C.composition_scores(W, path="gram"), C.composition_scores(W, path="cores")
    for m in C.MODES:
        assert ref[m][0, 1, 2, 2] < 1e-14 and 1e-11 < ref[m][0, 2, 2, 2] < tau             # the definition
        for s in (gram, cores):
            assert torch.isfinite(s[m]).all() and (s[m] >= 0).all()
            assert float(s[m][0, 1, 2, 2]) < 1e-14
            assert float(s[m][0, 2, 2, 2]) == pytest.approx(float(ref[m][0, 2, 2, 2]), rel=1e-5)
            assert float(s[m][0, 0, 2, 2]) > 0.01                         # the other writers do reach it
        # the cores the Gram path forms for them are the cores path's
        assert float(gram[m][0, 2, 2, 2]) == pytest.approx(float(cores[m][0, 2, 2, 2]), rel=1e-12)


def test_paths_agree_at_gpt2_small_widths():
    """d_model 768, 12 heads of 64 (three layers): the paths agree to 1e-12 relative wherever the score
    is above 1e-3 (random heads sit at 1/√768 ≈ 0.036)."""
    W = _weights(6, L=3, d=768, h=12, m=31, V=29)
    assert C.composition_path(W.cfg) == "gram"
    gram, cores = C.composition_scores(W, path="gram"), C.composition_scores(W, path="cores")
    for m in C.MODES:
        big = cores[m] > 1e-3
        assert int(big.sum()) == 3 * 144                                                  # every pair la < lb
        rel = ((gram[m] - cores[m]).abs() / cores[m].clamp(min=1e-300))[big]
        assert float(rel.max()) < 1e-12, (m, float(rel.max()))
        assert torch.equal(gram[m][~big], cores[m][~big])                                 # the zeros l_B ≤ l_A


class _CountMatmuls(TorchFunctionMode):
    """Multiply-adds of every matmul / @ / bmm called: batch · m · k · n."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm):
            a, b = args[0], args[1]
            batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]).numel()
            self.count += batch * a.shape[-2] * a.shape[-1] * b.shape[-1]
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("path", ["gram", "cores"])
def test_cost_is_the_multiply_adds_each_path_performs(path):
    """composition_costs (less the e × e norm products, 2·L·h·e³, which it leaves out) is what runs."""
    W = _weights(7, L=4, d=42, h=3)
    L, h, e = W.cfg.n_layers, W.cfg.n_heads, W.cfg.d_head
    with _CountMatmuls() as counter:
        C.composition_scores(W, path=path)
    assert counter.count - 2 * L * h * e ** 3 == C.composition_costs(W.cfg)[path]


def test_path_choice_follows_the_cost_and_memory_models():
    """Gram where it has fewer multiply-adds and fits MAX_BYTES; GPT-2 XL's Gram path would hold more
    (every head's four factors in float64), so XL keeps the cores."""
    from headscope.testing.hub import SIZES
    for name, s in SIZES.items():
        cfg = Config(n_layers=s["n_layer"], d_model=s["n_embd"], n_heads=s["n_head"], d_mlp=4 * s["n_embd"],
                     d_vocab=s["vocab_size"], n_ctx=s["n_ctx"])
        cost, mem = C.composition_costs(cfg), C.composition_bytes(cfg)
        want = "gram" if cost["gram"] < cost["cores"] and mem["gram"] <= C.MAX_BYTES else "cores"
        assert C.composition_path(cfg) == want, name
        assert cost["gram"] < cost["cores"] / 2, name                     # d ≪ 2e² at every GPT-2 width
        if name == "gpt2-xl":
            assert mem["gram"] > C.MAX_BYTES and C.composition_path(cfg) == "cores"
    # d > 2e² (d_head 4, d_model 96): the cores are cheaper
    cfg = Config(n_layers=5, d_model=96, n_heads=24, d_mlp=7, d_vocab=11, n_ctx=3)
    assert C.composition_path(cfg) == "cores"
