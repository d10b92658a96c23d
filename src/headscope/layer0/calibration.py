"""Calibrated softmax denominators of the layer-0 heads (seed 000, "contextual circuit").

The contextual heads' denominators are macroscopic properties of the text (see
:mod:`.denominators`), so the effective circuit needs them sampled from one
representative *calibration text*. With a fixed query token t_q (the seed's ' the')
at every query position n, the calibration records, per head h and position n,

    L_h[n]        = logsumexp_{i ≤ n} q_h[n]·key_i / √e       (the model's own log-denominator)
    log S_h[n]    = L_h[n] − log Z_h[n]                        (the seed's Σ_j pos·content, see layer0)

averaged over the calibration windows that reach position n (the average is taken of
the denominators themselves, ``log mean_w exp(·)``). The seed samples the denominators
"from this text": the windows start every :data:`STRIDE` tokens (overlapping, at most
``window − 1`` apart so every token is covered), so position n gets a sample from every
window start s with at least n tokens after s; ``counts[n]`` records how many.
:func:`check_samples` refuses a position with fewer than :data:`MIN_SAMPLES`
(``reproduce`` applies it at the scan's position). Keys are the text's true keys
(forward's ``hook_k``); the query is t_q at position n — the model's computation at n
had x_n been t_q. It also records σ₂, the median LayerNorm-2 scale of layer 0 over the
calibration positions (forward's ``blocks.0.ln2.hook_scale``, with the text's own
queries), which :mod:`.neurons` uses to map head outputs to MLP0 pre-activations.

A calibration depends on the weights (their fingerprint), on the processing
options, on the query token and on the text (sha256 of its UTF-8 bytes); all are
stored, and :func:`load_calibration` refuses a file made with another model or other
processing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
from pathlib import Path
from typing import Callable

import torch
from jaxtyping import Float

from . import split as layer0
from .._atomic import atomic_write_text, json_object_with
from .._errors import HeadscopeError, NotApplicable
from .._json import dumps
from ..corpus import check_window, token_array
from .._input import read_json_file
from ..core.forward import run_with_cache
from .split import SEED_QUERY
from ..core.model import Model
from ..core.weights import Processing

Tensor = torch.Tensor

FORMAT = "headscope.calibration"
FORMAT_VERSION = 1
#: step between calibration window starts (tokens); min(STRIDE, window − 1) is used
STRIDE = 128
#: fewest calibration samples (windows reaching n) at the position a seed row uses
MIN_SAMPLES = 4
#: recognises an earlier calibration file, which `save` may replace (headscope._atomic's output rule)
OWNED = json_object_with(format=FORMAT)


@dataclasses.dataclass
class Calibration:
    """Per-head, per-position calibrated denominators and what they depend on."""

    fingerprint: str
    processing: dict
    query: str
    query_id: int
    text_sha256: str
    n_text_tokens: int
    n_windows: int
    window: int
    c: float                                  # the key split's constant (see layer0)
    ln2_scale: float                          # median σ₂ of layer 0 on the calibration text
    counts: list[int]                         # windows reaching position n
    log_denom: Float[Tensor, "head pos"]      # log mean_w exp(L_h[n])
    log_seed_denom: Float[Tensor, "head pos"]  # log mean_w S_h[n]
    tokens: list[int] | None = None           # the first window's ids (BOS first): Gibson's code variant
    n_text_windows: int | None = None         # the text's windows (n_windows of them were run: a sample if fewer)

    @property
    def n_positions(self) -> int:
        return int(self.log_denom.shape[1])

    def to_dict(self) -> dict:
        return {
            "format": FORMAT, "version": FORMAT_VERSION,
            "fingerprint": self.fingerprint, "processing": self.processing,
            "query": self.query, "query_id": self.query_id,
            "text_sha256": self.text_sha256, "n_text_tokens": self.n_text_tokens,
            "n_windows": self.n_windows, "window": self.window,
            **({"n_text_windows": self.n_text_windows} if self.n_text_windows is not None else {}),
            "c": self.c, "ln2_scale": self.ln2_scale, "counts": self.counts,
            "normalisation": {
                "log_denom": "log of the model's softmax denominator, logsumexp_i q·k_i/sqrt(d_head)",
                "log_seed_denom": "log of the seed's S = sum_j pos[n,j]*content[n,x_j] = log_denom - log Z[n]",
            },
            "log_denom": self.log_denom.tolist(),
            "log_seed_denom": self.log_seed_denom.tolist(),
            **({"tokens": self.tokens} if self.tokens is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: dict, source: str = "calibration") -> "Calibration":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise HeadscopeError(f"{source} is not a headscope calibration file (no \"format\": \"{FORMAT}\")")
        if d.get("version") != FORMAT_VERSION:
            raise HeadscopeError(f"{source}: calibration format version: expected {FORMAT_VERSION}, got {d.get('version')!r}")
        if not isinstance(d.get("processing", {}), dict):
            raise HeadscopeError(f"{source}: calibration field 'processing': expected an object of booleans, "
                                 f"got {d['processing']!r}")
        try:
            ld = torch.tensor(d["log_denom"], dtype=torch.float64)
            ls = torch.tensor(d["log_seed_denom"], dtype=torch.float64)
            cal = cls(
                fingerprint=str(d["fingerprint"]), processing=dict(d["processing"]),
                query=str(d["query"]), query_id=int(d["query_id"]),
                text_sha256=str(d["text_sha256"]), n_text_tokens=int(d["n_text_tokens"]),
                n_windows=int(d["n_windows"]), window=int(d["window"]),
                c=float(d["c"]), ln2_scale=float(d["ln2_scale"]),
                counts=[int(x) for x in d["counts"]], log_denom=ld, log_seed_denom=ls,
                tokens=[int(x) for x in d["tokens"]] if d.get("tokens") is not None else None,
                n_text_windows=int(d["n_text_windows"]) if d.get("n_text_windows") is not None else None,
            )
        except KeyError as e:
            raise HeadscopeError(f"{source}: calibration file is missing the field {e.args[0]!r}") from None
        except (TypeError, ValueError, RuntimeError) as e:
            raise HeadscopeError(f"{source}: calibration file has a malformed field ({str(e).splitlines()[0]})") from None
        fields = sorted(Processing.default().to_dict())
        if sorted(cal.processing) != fields or not all(isinstance(v, bool) for v in cal.processing.values()):
            raise HeadscopeError(f"{source}: calibration field 'processing': expected booleans for exactly "
                                 f"{', '.join(fields)}, got {cal.processing!r}")
        if ld.dim() != 2 or ld.shape != ls.shape or ld.shape[1] != len(cal.counts) or ld.shape[1] == 0:
            raise HeadscopeError(f"{source}: calibration arrays have inconsistent shapes "
                                 f"({list(ld.shape)}, {list(ls.shape)}, {len(cal.counts)} counts)")
        if not (torch.isfinite(ld).all() and torch.isfinite(ls).all()) or not cal.ln2_scale > 0:
            raise HeadscopeError(f"{source}: calibration holds non-finite denominators or a non-positive ln2_scale")
        return cal

    def check(self, model: Model, source: str = "calibration") -> "Calibration":
        """Refuse a calibration made for another model or another processing than `model`'s."""
        processing = model.resolved_processing()
        if self.fingerprint != model.fingerprint:
            raise HeadscopeError(
                f"{source} was made for another model: its weights' sha256 is {self.fingerprint[:12]}…, "
                f"this model's is {model.fingerprint[:12]}… (recalibrate with `headscope calibrate`)")
        if self.processing != processing.to_dict():
            raise HeadscopeError(
                f"{source} was made with other processing: expected {Processing(**self.processing).label()}, "
                f"got {processing.label()} (recalibrate with the same processing)")
        if self.log_denom.shape[0] != model.cfg.n_heads or self.n_positions > model.cfg.n_ctx:
            raise HeadscopeError(f"{source}: shape {list(self.log_denom.shape)} does not fit this model "
                                 f"({model.cfg.n_heads} heads, n_ctx {model.cfg.n_ctx})")
        return self

    def save(self, path: str | Path) -> Path:
        """Write the calibration to `path` (new, or an earlier calibration file: the output rule)."""
        return atomic_write_text(Path(path), dumps(self.to_dict()), owned=OWNED)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: a text longer than this (characters) is long work: calibrate prints its tokenising progress on stderr
PROGRESS_CHARS = 4 << 20
#: windows × positions × d_model above which the windows' forward passes are long work (progress on stderr)
PROGRESS_WORK = 1 << 26
#: at most this many windows are run (a seeded sample of the text's windows when it has more): time and
#: memory bounded whatever the text's length
MAX_WINDOWS = 256
#: the seed of that sample
SAMPLE_SEED = 0


def _progress(what: str, total: int, unit: str, force: bool = False) -> Callable[[int, int], None] | None:
    """A progress callback printing ``what: 30% of N unit`` on stderr at every tenth (for long work only:
    `total` over :data:`PROGRESS_CHARS` characters, or `force`)."""
    if not force and total <= PROGRESS_CHARS:
        return None
    shown = [0]
    size = f"{total / 2**20:.1f} M characters of text" if unit == "chars" else f"{total} {unit}"

    def report(done: int, _total: int) -> None:
        tenth = 10 * done // total
        if tenth > shown[0]:
            shown[0] = tenth
            print(f"{what}: {10 * tenth}% of {size}", file=sys.stderr, flush=True)
    return report


def sample_windows(n_windows: int, max_windows: int | None, seed: int = SAMPLE_SEED) -> list[int]:
    """Indices of the windows to run, ascending: all of them, or a uniform sample of `max_windows` drawn with
    `seed` (torch.randperm) when there are more."""
    if max_windows is None or n_windows <= max_windows:
        return list(range(n_windows))
    g = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(n_windows, generator=g)[:max_windows].tolist())


def check_samples(cal: "Calibration", n: int, minimum: int = MIN_SAMPLES) -> int:
    """The number of calibration samples at position n; NotApplicable below `minimum`."""
    got = cal.counts[n] if 0 <= n < len(cal.counts) else 0
    if got < minimum:
        raise NotApplicable(f"calibration: {got} sample(s) of the denominators at position {n}, fewer than the "
                            f"minimum {minimum} (a longer calibration text, or a smaller position)")
    return got


@torch.no_grad()
def calibrate(
    model: Model,
    text: str,
    *,
    query: str = SEED_QUERY,
    window: int | None = None,
    c: float | None = None,
    stride: int | None = None,
    max_windows: int | None = MAX_WINDOWS,
    progress: bool | None = None,
) -> Calibration:
    """Sample every layer-0 head's denominator on `text` with query token `query`.

    The text is tokenised piece by piece into one int32 array (4 bytes a token); a window
    ``[BOS] + ids[k·step : k·step + window − 1]`` starts every `step` tokens. When the text has
    more than `max_windows` windows, a uniform sample of `max_windows` of them (seed
    :data:`SAMPLE_SEED`) is run, so time and memory are bounded whatever its length;
    ``n_windows`` records the windows run and ``n_text_windows`` the text's.
    The mean over windows is taken of the denominators themselves, stably per head and
    position: a running ``log Σ_w exp(L_w[h, n])`` with its own shift for every (h, n),
    so heads whose log-denominators lie hundreds of nats apart never underflow.
    `progress`: print progress on stderr (None: for long work only).
    """
    w = layer0.view(model)
    qid = layer0.token_id(model, query)
    c = layer0.measure_c(w) if c is None else float(c)
    if not text.strip():
        raise HeadscopeError("calibration text is empty")
    if max_windows is not None and (isinstance(max_windows, bool) or not isinstance(max_windows, int)
                                    or max_windows < 1):
        raise HeadscopeError(f"max_windows: expected a positive integer or None, got {max_windows!r}")
    n_ctx = check_window(model, model.cfg.n_ctx if window is None else min(window, model.cfg.n_ctx))
    step = max(min(STRIDE if stride is None else int(stride), n_ctx - 1), 1)
    ids = token_array(model, text, progress=None if progress is False else
                      _progress("calibrate: tokenised", len(text), "chars"))
    n_tokens = int(ids.numel())
    if not n_tokens:
        raise HeadscopeError("empty corpus: the texts contain no tokens")
    n_text_windows = -(-n_tokens // step)                                      # window k starts at token k·step
    chosen = sample_windows(n_text_windows, max_windows)
    long_work = len(chosen) * n_ctx * model.cfg.d_model > PROGRESS_WORK or len(text) > PROGRESS_CHARS
    if progress or (progress is None and long_work):
        sampled = f"a sample of {len(chosen)} (seed {SAMPLE_SEED}) of " if len(chosen) < n_text_windows else ""
        print(f"calibrate: {n_tokens} tokens; running {sampled}{n_text_windows} windows of up to {n_ctx} tokens",
              file=sys.stderr, flush=True)
        report = _progress("calibrate", len(chosen), "windows", force=True)
    else:
        report = None

    def window_ids(k: int) -> torch.Tensor:
        chunk = ids[k * step: k * step + n_ctx - 1].long()
        return torch.cat([torch.tensor([model.bos_id], dtype=torch.long), chunk])     # [≤ n_ctx]

    H = model.cfg.n_heads
    log_sum = torch.full((H, n_ctx), -math.inf, dtype=torch.float64)             # log Σ_w exp(L_w)
    counts = torch.zeros(n_ctx, dtype=torch.long)
    scales = []                  # float32, one per position of each window run: at most max_windows × n_ctx
    P = 0
    queries: dict[int, Tensor] = {}          # the query token's queries by window length: computed once
    for i, k in enumerate(chosen):
        x = window_ids(k)
        P = max(P, x.numel())
        cache = run_with_cache(w, x[None], names=["blocks.0.attn.hook_k", "blocks.0.ln2.hook_scale"], stop_at_layer=1)
        L = layer0.fixed_query_log_denominators(w, cache["blocks.0.attn.hook_k"], qid, queries)[0]   # [head q]
        p = L.shape[1]
        log_sum[:, :p] = torch.logaddexp(log_sum[:, :p], L)
        counts[:p] += 1
        scales.append(cache["blocks.0.ln2.hook_scale"][0, 1:] if p > 1 else cache["blocks.0.ln2.hook_scale"][0])
        del cache
        if report is not None:
            report(i + 1, len(chosen))
    log_sum, counts = log_sum[:, :P], counts[:P]
    log_denom = log_sum - counts.double().log()                                   # [head P]
    log_seed = log_denom - layer0.log_Z(w, qid, P, c)
    return Calibration(
        fingerprint=model.fingerprint, processing=model.resolved_processing().to_dict(), query=query, query_id=qid,
        text_sha256=text_sha256(text), n_text_tokens=n_tokens,
        n_windows=len(chosen), window=P, c=c, ln2_scale=float(torch.cat(scales).median()),
        counts=counts.tolist(), log_denom=log_denom, log_seed_denom=log_seed, tokens=window_ids(0).tolist(),
        n_text_windows=n_text_windows,
    )


def load_calibration(path: str | Path, model: Model | None = None) -> Calibration:
    """Read a calibration file; with `model`, refuse one made for another model/processing."""
    d = read_json_file(path, "calibration file", hint="; it may be truncated or corrupted — recreate it with "
                                                      "`headscope calibrate`")
    cal = Calibration.from_dict(d, source=str(path))
    if model is not None:
        cal.check(model, source=str(path))
    return cal
