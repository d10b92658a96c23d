"""A checkpoint's validated weight files, read on demand into raw or processed weights.

What the stored tensors mean — key names, prefix, buffers, the tied or untied unembedding,
transposes and reshapes into :class:`Block` — is the model family's, read from config.json's
``model_type`` (:mod:`headscope.core.families`; GPT-2: :mod:`headscope.core.families.gpt2`).
Refused here, each with one line: non-float weights (integers and bools are never cast), a
tensor stored both with and without the prefix, tensors of layers beyond ``n_layer`` or of no
weight of the family, missing tensors, wrong shapes, NaN or Inf. Weights may be float16,
bfloat16, float32 or float64 (stated casts: to float32 for processing, to ``dtype`` for the
result).

Memory
------
Loading reads the headers, streams once through the data to check it is finite (64 MB at a
time, memory-mapped, released as it goes) and keeps no weights. :meth:`Checkpoint.processed`
builds processed weights block by block straight from the files: a block's raw tensors are
copied out of the memory map, processed, and released with the map, so raw and processed
weights never coexist in full; the raw weights are built only when asked for, and a tied W_U
is a view ``W_E.T``, not a second copy.

Fingerprint
-----------
:meth:`Checkpoint.fingerprint` identifies the weight files: the sha256 of the one weight file
(``model.safetensors``, or ``pytorch_model.bin``); for sharded safetensors, the sha256 of the
text ``"<sha256 of shard>  <shard file name>\\n"`` for every shard in name order (the lines
``sha256sum model-*.safetensors`` prints).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import torch

from .._errors import HeadscopeError, expected_got
from .._memory import available_bytes
from .._threads import one_thread
from .config import Config
from .families import GPT2, Family
from .sources import FLOAT_DTYPES, DictSource, Source, file_sha256, open_source
from .weights import Block, Processing, Weights, process_block, process_embed, process_unembed

_READ_BATCH_BYTES = 1 << 26   # the value check maps at most this much of the files at a time


def _max_abs(t: torch.Tensor) -> float:
    """max |t| from one min/max pass (no temporaries); NaN or inf if any entry is not finite."""
    if t.numel() == 0:
        return 0.0
    lo, hi = (float(x) for x in torch.aminmax(t.reshape(-1)))
    if math.isnan(lo) or math.isnan(hi):
        return math.nan
    return max(abs(lo), abs(hi))


def max_weight(cfg: Config) -> float:
    """The largest |w| headscope accepts in a checkpoint of shape `cfg` (README, JSON notes).

    Two chains of weights must stay inside float32 (F = FLT_MAX, d = d_model, with a
    normalised residual x̂, |x̂_i| ≤ √d, and every |w| ≤ b):

    - the attention score ``(x̂ γ W_Q)·(x̂ γ W_K)``, four weights summed over at most d⁴
      terms: b ≤ F^(1/4) / (2d);
    - the residual stream, which a LayerNorm squares and sums over d: each layer adds at
      most (d + d_mlp)·d^1.5·b³ (x̂ γ W_V W_O and x̂ γ W_in W_out), so with L layers
      2·L·(d + d_mlp)·d^1.5·b³ ≤ √(F/d).

    The bound is the smaller of the two (the factors 2 leave room for biases, embeddings
    and rounding). GPT-2 small: about 700; real checkpoints stay far below it.
    """
    F, d = float(torch.finfo(torch.float32).max), cfg.d_model
    score = F ** 0.25 / (2 * d)
    residual = (math.sqrt(F / d) / (2 * cfg.n_layers * (d + cfg.d_mlp) * d ** 1.5)) ** (1 / 3)
    return min(score, residual)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to do
        return None


def _return_free_memory() -> None:
    """Hand freed heap pages back to the OS (glibc's ``malloc_trim``).

    A block's temporaries are freed chunks of a few MB scattered between the tensors that
    are kept; glibc keeps them mapped, which would add ~20 % to the resident size of the
    weights built block by block.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _fresh(t: torch.Tensor, dtype: torch.dtype, device=None) -> torch.Tensor:
    """A new contiguous tensor holding `t` in `dtype` (never a view of a memory map)."""
    return torch.empty(t.shape, dtype=dtype, device=device).copy_(t)


class Checkpoint:
    """The validated weight files of a checkpoint; tensors are read on demand.

    ``names`` maps each canonical (unprefixed) name to its stored key; ``untied`` says
    whether the family's unembedding (GPT-2: ``lm_head.weight``) is a separate tensor.
    What the names mean is the `family`'s (:mod:`headscope.core.families`).
    """

    def __init__(self, source: Source, cfg: Config, *, family: Family = GPT2, tie_word_embeddings: bool = True,
                 where: str = "checkpoint"):
        self.source, self.cfg, self.family, self.where = source, cfg, family, where
        self.names: dict[str, str] = {}
        unembed, buffers = family.unembed, family.buffers
        for key in sorted(source.infos):
            name = family.canonical(key)
            layer, leaf = family.layer_leaf(name)
            known = (name in family.top.values() or leaf in family.leaves or leaf in buffers
                     or name in family.top_buffers or (name in (unembed, family.unembed_bias) and key == name))
            if not known:
                raise HeadscopeError(f"{where} holds an unexpected tensor {key!r} (not a weight of {family.hf_class})")
            if layer is not None and layer >= cfg.n_layers:
                raise HeadscopeError(f"{where} holds {key!r} for layer {layer}, but config.json has n_layer "
                                     f"{cfg.n_layers} (layers 0..{cfg.n_layers - 1})")
            if name in self.names:
                raise HeadscopeError(f"{where} holds both {self.names[name]!r} and {key!r} (one tensor stored twice)")
            self.names[name] = key
            dtype = source.infos[key][0]
            if leaf not in buffers and name not in family.top_buffers and dtype not in FLOAT_DTYPES:
                raise HeadscopeError(f"{where}: tensor {key!r} has dtype {dtype}; headscope reads floating-point "
                                     f"weights only ({', '.join(FLOAT_DTYPES)}) and never casts {dtype} to float")
        self.shapes = family.shapes(cfg)
        for name, shape in self.shapes.items():
            if name not in self.names:
                raise HeadscopeError(f"checkpoint is missing tensor {name!r}")
            got = source.infos[self.names[name]][1]
            if got != shape:
                raise HeadscopeError(expected_got(f"shape of {name}", list(shape), list(got)))
        if family.unembed_bias is not None:                          # GPT-J's lm_head.bias, tied or not
            if family.unembed_bias not in self.names:
                raise HeadscopeError(f"checkpoint is missing tensor {family.unembed_bias!r}")
            got = source.infos[family.unembed_bias][1]
            if got != (cfg.d_vocab,):
                raise HeadscopeError(expected_got(f"shape of {family.unembed_bias}", [cfg.d_vocab], list(got)))
            self.shapes[family.unembed_bias] = (cfg.d_vocab,)
        self.untied = unembed in self.names
        if self.untied:
            shape, got = (cfg.d_vocab, cfg.d_model), source.infos[unembed][1]
            if got != shape:
                raise HeadscopeError(expected_got(f"shape of {unembed}", list(shape), list(got)))
            self.shapes[unembed] = shape
        elif not tie_word_embeddings:
            raise HeadscopeError(f"{where}: config.json sets tie_word_embeddings false but there is no {unembed}")

    @classmethod
    def open(cls, directory: Path, cfg: Config, *, family: Family = GPT2, tie_word_embeddings: bool = True
             ) -> "Checkpoint":
        return cls(open_source(directory), cfg, family=family, tie_word_embeddings=tie_word_embeddings,
                   where=str(directory))

    # -- facts --------------------------------------------------------------------------

    @property
    def layout(self) -> str:
        return self.source.layout

    @property
    def n_parameters(self) -> int:
        return sum(math.prod(s) for s in self.shapes.values())   # lm_head is in shapes only when untied

    @property
    def working_dtype(self) -> torch.dtype:
        """float64 when every weight is stored in float64, else float32."""
        dtypes = {self.source.infos[self.names[n]][0] for n in self.shapes}
        return torch.float64 if dtypes == {"float64"} else torch.float32

    def fingerprint(self) -> str:
        """sha256 of the weight file; for shards, of their ``sha256sum`` lines in name order
        (computed once: every :meth:`Model.bound` copy shares this checkpoint). Waits for
        :meth:`prefetch_fingerprint`'s thread if one runs, and raises what it raised."""
        thread = getattr(self, "_fingerprint_thread", None)
        if thread is not None:
            thread.join()
            if self._fingerprint_error is not None:
                raise self._fingerprint_error
        if getattr(self, "_fingerprint", None) is None:
            self._fingerprint = self._hash_files()
        return self._fingerprint

    def prefetch_fingerprint(self) -> None:
        """Start hashing the weight files in a background thread (reading and sha256 release the
        GIL: the hash runs on a core the caller leaves idle, e.g. while the tokenizer's import holds
        the GIL); :meth:`fingerprint` waits for it. Nothing is started when the fingerprint is known,
        already being computed, or the weights are held in memory (no files)."""
        if getattr(self, "_fingerprint", None) is not None or getattr(self, "_fingerprint_thread", None) is not None:
            return
        if not self.source.files:
            return
        self._fingerprint_error = None

        def run():
            try:
                self._fingerprint = self._hash_files()
            except BaseException as e:    # re-raised by fingerprint() in the caller's thread
                self._fingerprint_error = e

        self._fingerprint_thread = threading.Thread(target=run, name="headscope-fingerprint", daemon=True)
        self._fingerprint_thread.start()

    def _hash_files(self) -> str:
        files = self.source.files
        if not files:
            raise HeadscopeError("weights held in memory have no file fingerprint")
        self.source.check_unchanged()           # the files this model loaded, before and after hashing
        if len(files) == 1:
            digest = file_sha256(files[0])
        else:
            lines = "".join(f"{file_sha256(p)}  {p.name}\n" for p in sorted(files, key=lambda p: p.name))
            digest = hashlib.sha256(lines.encode("utf-8")).hexdigest()
        self.source.check_unchanged()
        return digest

    def check_values(self) -> None:
        """Stream once through the weights: every value finite; an lm_head equal to wte is a tie.

        Reads at most ``_READ_BATCH_BYTES`` of mapped file per open, so the pages it
        touches are released as it goes.
        """
        batch, size = [], 0
        bound = max_weight(self.cfg)
        itemsize = {n: torch.empty((), dtype=dt).element_size() for n, dt in FLOAT_DTYPES.items()}
        groups = []
        for name, shape in self.shapes.items():
            nb = math.prod(shape) * itemsize[self.source.infos[self.names[name]][0]]
            if batch and size + nb > _READ_BATCH_BYTES:
                groups.append(batch)
                batch, size = [], 0
            batch.append(name)
            size += nb
        groups.append(batch)
        # one torch thread: a min/max pass is memory-bound, and two threads spent 5× the CPU of one
        # (GPT-2 small, 2 busy cores: 0.5 vs 0.08 CPU s; 1.2 vs 0.2 s wall)
        with one_thread():
            for group in groups:
                with self.source.open() as get:
                    for name in group:
                        t = get(self.names[name])
                        m = _max_abs(t)
                        if not math.isfinite(m):
                            raise HeadscopeError(f"weight {self.names[name]} contains NaN or Inf values")
                        if m > bound:
                            raise HeadscopeError(
                                f"weight {self.names[name]} holds a value of magnitude {m:.3g}, over the bound "
                                f"{bound:.3g} within which float32 analyses of a model of this shape cannot "
                                "overflow (README, JSON notes: finite weights, finite figures)")
                        del t
        if self.untied:
            with self.source.open() as get:
                a, b = get(self.names[self.family.unembed]), get(self.names[self.family.top["W_E"]])
                rows = max(1, (1 << 22) // self.cfg.d_model)
                same = a.dtype == b.dtype and all(torch.equal(a[i:i + rows], b[i:i + rows])
                                                  for i in range(0, self.cfg.d_vocab, rows))
                del a, b
            if same:
                self.untied = False
                del self.shapes[self.family.unembed]

    # -- reading ------------------------------------------------------------------------

    def read(self, names: list[str], dtype: torch.dtype, device=None, *, share: bool = False
             ) -> dict[str, torch.Tensor]:
        """Fresh copies of the canonical tensors `names` in `dtype` (the files are released after).

        With `share`, a tensor held in memory (a state dict, not a file) that already has
        `dtype` and `device` is returned itself, not copied: for read-only use.
        """
        where = torch.device("cpu") if device is None else torch.device(device)
        with self.source.open() as get:
            out = {}
            for n in names:
                t = get(self.names[n])
                keep = share and self.source.in_memory and t.dtype == dtype and t.device == where
                out[n] = t if keep else _fresh(t, dtype, device)
                del t
        return out

    def raw_block(self, layer: int, dtype: torch.dtype, device=None, *, share: bool = False) -> Block:
        f = self.family
        names = {k: f.block_name(layer, k) for k in f.leaves}
        t = self.read(list(names.values()), dtype, device, share=share)
        return f.block_from_hf({k: t[n] for k, n in names.items()}, self.cfg)

    def _top(self, dtype, device=None, *, share: bool = False) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The tensors outside the blocks by Weights field (W_E, W_pos, ln_final_w, ln_final_b), and W_U."""
        f = self.family
        stored = self.read(list(f.top.values()) + ([f.unembed] if self.untied else [])
                           + ([f.unembed_bias] if f.unembed_bias else []), dtype, device, share=share)
        top = {field: stored[name] for field, name in f.top.items()}
        top["b_U"] = (stored[f.unembed_bias] if f.unembed_bias else
                      torch.zeros(self.cfg.d_vocab, dtype=dtype, device=device))
        W_U = (stored[f.unembed] if self.untied else top["W_E"]).T   # [d_vocab d] → [d d_vocab]
        del stored
        if f.top_from_hf is not None:
            top = {field: t if field == "b_U" else f.top_from_hf(field, t, self.cfg) for field, t in top.items()}
        if f.top_combine is not None:
            top, W_U = f.top_combine(top, W_U, self.cfg)
        if "ln_final_b" not in top:                                  # RMSNorm: no bias stored
            top["ln_final_b"] = torch.zeros_like(top["ln_final_w"])
        top.setdefault("W_pos", None)                                # rotary: no position table
        return top, W_U

    def raw(self, dtype: torch.dtype, device=None) -> Weights:
        """Unprocessed weights in `dtype` on `device`; a tied W_U is the view ``W_E.T``.

        Tensors of a state dict in memory are shared when no cast or move is needed."""
        top, W_U = self._top(dtype, device, share=True)
        blocks = []
        for l in range(self.cfg.n_layers):
            blocks.append(self.raw_block(l, dtype, device, share=True))
            _return_free_memory()
        return Weights(cfg=self.cfg, W_E=top["W_E"], W_pos=top["W_pos"], blocks=blocks,
                       ln_final_w=top["ln_final_w"], ln_final_b=top["ln_final_b"], W_U=W_U,
                       b_U=top["b_U"])

    def processed(self, processing: Processing, dtype: torch.dtype, device=None, *,
                  budget: int | None | bool = False) -> Weights:
        """Processed weights, built block by block on the CPU in float32 (float64 for a float64
        model), each block cast to `dtype` and moved to `device` as soon as it is done.

        From files, blocks are built when read and at most `budget` bytes of them are held (None:
        all; the default: :func:`block_budget`); the others are rebuilt when read again."""
        work = torch.float64 if dtype == torch.float64 else torch.float32
        move = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731 - no copy when nothing changes
        with one_thread():      # copies, means and matrix-vector products: memory-bound (see block below)
            top, W_U = self._top(work)
            # W_U first: a tied W_U reads the raw W_E, which is then centred in place (no second copy)
            W_U, b_U, ln_w, ln_b = process_unembed(W_U, top["b_U"],
                                                   top["ln_final_w"], top["ln_final_b"], processing, self.cfg.vocab)
            if not W_U.is_contiguous() or W_U.data_ptr() == top["W_E"].data_ptr():
                W_U = W_U.clone(memory_format=torch.contiguous_format)   # processing left W_U alone: a dense copy
            W_E, W_pos = process_embed(top["W_E"], top.get("W_pos"), processing, inplace=True)
            del top
        W_E, W_U, b_U, ln_w, ln_b = map(move, (W_E, W_U, b_U, ln_w, ln_b))
        W_pos = move(W_pos) if W_pos is not None else None          # rotary models have no W_pos

        stamp = _files_stamp(self.source.files)
        itemsize = torch.empty((), dtype=dtype).element_size()
        nbytes = sum(math.prod(s) for s in Block.shapes(None, self.cfg).values()) * itemsize   # one block held

        def block(l: int) -> Block:
            if _files_stamp(self.source.files) != stamp:
                raise HeadscopeError(f"the weight files of {self.where} changed or went away after the model's "
                                     f"weights were first read (block {l} was still to be read); load it again")
            # one thread: copies, means and scalings rewritten in place are memory-bound; GPT-2 small's 12
            # blocks on two busy cores (load 14): 0.8 CPU s / 2.0 s wall on one thread against 3.2 / 8.0 s on
            # two (out of place, on an idle machine: 0.88 s wall on one, 0.57 s on two at 1.3× the CPU) —
            # the same bits either way (tests/unit/test_load_threads.py)
            with one_thread():
                b = process_block(self.raw_block(l, work), processing, inplace=True)   # a fresh copy: ours
                out = Block(**{k: move(getattr(b, k)) for k in b.shapes(self.cfg)})
            del b
            _return_free_memory()
            return out

        # from files: each block processed when first read (a command that reads layer 0 processes
        # layer 0 only); a state dict in memory, which its owner may change, is processed now
        L = self.cfg.n_layers
        blocks = _LazyBlocks(L, block, nbytes, block_budget(L, nbytes) if budget is False else budget)
        if self.source.in_memory:
            blocks = list(blocks)
        return Weights(cfg=self.cfg, W_E=W_E, W_pos=W_pos, blocks=blocks, ln_final_w=ln_w, ln_final_b=ln_b,
                       W_U=W_U, b_U=b_U, processing=processing)


def _files_stamp(files) -> tuple:
    """(inode, size, mtime) of each file, None for one that is gone: what a later read must still find."""
    out = []
    for f in files:
        try:
            s = os.stat(f)
            out.append((s.st_ino, s.st_size, s.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


#: environment variable: bytes of processed blocks a model keeps in memory ("2G", "512M", "all")
BLOCK_BUDGET_ENV = "HEADSCOPE_BLOCK_BUDGET"
#: share of the available memory the processed blocks may take by default (when they do not all fit in it).
#: A third: on GPT-2 XL (5.9 GB of blocks) the report's other memory (embeddings, unembedding, the stages'
#: working sets) peaks at about 3.3 GB, 0.56× the blocks, so blocks within a third leave the rest two thirds.
#: A quarter dropped XL's blocks on a 24 GB machine whenever less than 23.6 GB was available, and the atlas's
#: rebuilds then cost it 20 s of 90 (2026-12-06, docs/performance.md).
BLOCK_SHARE = 1 / 3


def parse_bytes(text: str) -> int | None:
    """``"2G"``, ``"512M"``, ``"1048576"`` → bytes; ``"all"`` → None (no budget: keep every block)."""
    t = text.strip().upper().removesuffix("B")
    if t in ("ALL", "NONE", ""):
        return None
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        n = float(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise HeadscopeError(f"{BLOCK_BUDGET_ENV}: expected bytes such as 2G, 512M or all, got {text!r}") from None
    if not n >= 0:
        raise HeadscopeError(f"{BLOCK_BUDGET_ENV}: expected a byte count ≥ 0, got {text!r}")
    return int(n)


def block_budget(n_blocks: int, block_bytes: int) -> int | None:
    """Bytes of processed blocks to keep (None: all of them).

    ``HEADSCOPE_BLOCK_BUDGET`` if set; otherwise every block when the whole model's blocks take at
    most :data:`BLOCK_SHARE` of the available memory (every model that fitted before is held as
    before), else that share (at least one block). Results never depend on it: an evicted block is
    rebuilt from the files, bit for bit the same."""
    env = os.environ.get(BLOCK_BUDGET_ENV)
    if env is not None:
        return parse_bytes(env)
    avail = available_bytes()
    if avail is None or n_blocks * block_bytes <= BLOCK_SHARE * avail:
        return None
    return max(block_bytes, int(BLOCK_SHARE * avail))


#: every block store built in this process, for :func:`block_stats` (weakly held)
_STORES: "list[weakref.ref[_LazyBlocks]]" = []


def block_stats() -> list[dict]:
    """How often each model's blocks were built in this process, and what that cost (benchmarks)."""
    return [s.stats() for s in (r() for r in _STORES) if s is not None]


class _LazyBlocks(Sequence):
    """The blocks of processed weights, each built by ``build(l)`` when read and not held.

    A sequence like the list it stands for (index, slice, iterate, len). Blocks are kept in
    least-recently-read order within `budget` bytes (None: all kept, the same Block object on
    every access); to make room for a block, the least recently read are dropped first, so at most
    max(budget, one block) bytes are held here at any time. A dropped block is rebuilt when read
    again: processing is deterministic, so the rebuilt tensors are bit for bit the old ones (a
    caller still holding the old Block object keeps it alive until it lets go). Pickles as the
    plain list of every block."""

    def __init__(self, n: int, build, block_bytes: int = 0, budget: int | None = None):
        self._build, self._lock = build, threading.RLock()
        self._n, self.block_bytes, self.budget = n, block_bytes, budget
        self._held: OrderedDict[int, Block] = OrderedDict()
        self.builds = [0] * n                   #: times each block was built
        self.build_seconds = 0.0                #: CPU seconds (process time) spent building them
        self.peak_held = 0                      #: most blocks held at once
        _STORES[:] = [r for r in _STORES if r() is not None] + [weakref.ref(self)]

    def __len__(self) -> int:
        return self._n

    def _room(self) -> int:
        """Blocks that fit the budget (at least one)."""
        if self.budget is None:
            return self._n
        return max(1, self.budget // max(1, self.block_bytes))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]                                  # negative indices; IndexError past the end
        with self._lock:
            b = self._held.get(i)
            if b is not None:
                self._held.move_to_end(i)
                return b
            while len(self._held) >= self._room():               # make room first: never over budget
                self._held.popitem(last=False)
            if self.budget is not None:
                _return_free_memory()
            t0 = time.process_time()
            b = self._build(i)
            self.build_seconds += time.process_time() - t0
            self.builds[i] += 1
            self._held[i] = b
            self.peak_held = max(self.peak_held, len(self._held))
            return b

    def holds_all(self) -> bool:
        """Whether every block fits the budget (read once, never dropped)."""
        return self._room() >= self._n

    def held(self) -> list[int]:
        """The layers whose blocks are held now, least recently read first."""
        return list(self._held)

    def stats(self) -> dict:
        return {"n_layers": self._n, "block_bytes": self.block_bytes, "budget": self.budget,
                "builds": sum(self.builds), "rebuilds": sum(max(0, c - 1) for c in self.builds),
                "build_seconds": round(self.build_seconds, 3), "peak_held": self.peak_held}

    def __reduce__(self):
        return list, (list(self),)

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, _LazyBlocks)) else NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        budget = "all" if self.budget is None else f"{self.budget} B"
        return f"_LazyBlocks({len(self._held)}/{len(self)} held, budget {budget})"


def from_hf_state_dict(state: dict[str, torch.Tensor], cfg: Config) -> Weights:
    """HF GPT-2 state dict → canonical :class:`Weights`, every key, dtype and shape checked.

    Weights come out in float32 (float64 if the state dict's are float64); a stored
    ``lm_head.weight`` is the unembedding (W_U = lm_head.weightᵀ), else W_U is the view
    ``W_E.T``.
    """
    ckpt = state_dict_checkpoint(state, cfg)
    return ckpt.raw(ckpt.working_dtype)


def state_dict_checkpoint(state: dict[str, torch.Tensor], cfg: Config, *, family: Family = GPT2,
                          tie_word_embeddings: bool = True, where: str = "state dict") -> "Checkpoint":
    """A :class:`Checkpoint` over a state dict in memory (GPT-2: ``transformer.`` prefix optional;
    a ``lm_head.weight`` equal to ``wte.weight`` is the tied unembedding, not a second one)."""
    return Checkpoint(DictSource(state, family), cfg, family=family, tie_word_embeddings=tie_word_embeddings,
                      where=where)
