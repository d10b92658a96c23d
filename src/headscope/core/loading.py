"""Checkpoints → canonical weights: hub ids, local directories, the offline HF cache.

Layouts
-------
A checkpoint is a Hugging Face model directory: ``config.json``, the weights and the
tokenizer files (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``). The weights are
read from the first of these that exists:

1. ``model.safetensors``;
2. ``model.safetensors.index.json`` and the shards its ``weight_map`` names;
3. ``pytorch_model.bin``, read with ``torch.load(weights_only=True)``: plain tensors in a
   dict, never arbitrary unpickling (a pickle that asks for anything else is refused).
   A zip-format file (torch ≥ 1.6) is memory-mapped; a legacy one is read whole.

What the stored tensors mean — key names, prefix, buffers, the tied or untied unembedding,
transposes and reshapes into :class:`Block` — is the model family's, read from config.json's
``model_type`` (:mod:`headscope.core.families`; GPT-2: :mod:`headscope.core.families.gpt2`).
Refused here, each with one line: non-float weights (integers and bools are never cast), a
tensor stored both with and without the prefix, tensors of layers beyond ``n_layer`` or of no
weight of the family, missing tensors, wrong shapes, NaN or Inf. Weights may be float16,
bfloat16, float32 or float64 (stated casts: to float32 for processing, to ``dtype`` for the
result). An untied unembedding is kept through processing and written back by :meth:`Model.save`.

Memory
------
:func:`load` reads the headers, streams once through the data to check it is finite
(64 MB at a time, memory-mapped, released as it goes) and keeps no weights.
:meth:`Model.weights` builds processed weights block by block straight from the files:
a block's raw tensors are copied out of the memory map, processed, and released with
the map, so raw and processed weights never coexist in full; ``model.raw`` is built
only when asked for, and its tied W_U is a view ``W_E.T``, not a second copy.
:meth:`Model.save` streams tensor by tensor into the safetensors file.

Fingerprint
-----------
``Model.fingerprint`` identifies the weight files: the sha256 of the one weight file
(``model.safetensors``, or ``pytorch_model.bin``); for sharded safetensors, the sha256
of the text ``"<sha256 of shard>  <shard file name>\\n"`` for every shard in name order
(the lines ``sha256sum model-*.safetensors`` prints).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import dataclasses
import functools
import hashlib
import math
import os
import pickle
import shutil
import stat
import zipfile
from pathlib import Path
from typing import Callable, Iterator

import torch
from safetensors import SafetensorError, safe_open

from .._errors import BadArgument, HeadscopeError, expected_got
from ._safetensors import write_safetensors
from .config import Config, read_hf_config
from .families import FAMILIES, GPT2, Family, read_config
from ..corpus import CHECKPOINT_FILE_LIMIT, read_json_file
from .._atomic import atomic_directory, kind_of, refuse_unfinished
from .bos import bos as bos_record
from .tokenizer import TOKENIZER_FILES, check_tokenizer, gpt2_bpe_files, load_tokenizer, to_str_tokens
from .weights import Block, Processing, Weights, process_block, process_embed, process_unembed

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
BIN_FILE = "pytorch_model.bin"

#: dtypes a weight may be stored in, and the dtypes a model may be loaded in.
FLOAT_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64}
_ST_DTYPE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "BOOL": "bool",
                   "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
                   "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64",
                   "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_READ_BATCH_BYTES = 1 << 26   # the value check maps at most this much of the files at a time


@dataclasses.dataclass(eq=False)
class Model:
    """A loaded checkpoint: config, its weight files, tokenizer, and where it came from.

    Weights are built on demand: :meth:`weights` (processed, cached per processing),
    :attr:`raw` (unprocessed, built on first access), :meth:`raw_block` (one block).

    A model is bound to one processing (:attr:`processing`; ``None``: the seed studies'
    default): analyses take the model and read ``model.weights()``, which is the bound
    processing's weights. :meth:`bound` returns the same model bound to another processing;
    the copies share the files, the tokenizer and every cache.
    """

    cfg: Config
    checkpoint: "Checkpoint" = dataclasses.field(repr=False)
    tokenizer: object = dataclasses.field(repr=False)
    source: str = ""
    directory: Path = Path(".")
    device: torch.device = torch.device("cpu")
    dtype: torch.dtype = torch.float32
    _processed: dict = dataclasses.field(default_factory=dict, repr=False)
    _derived: dict = dataclasses.field(default_factory=dict, repr=False)
    config_bos: int | None = None                   #: config.json's bos_token_id, if any
    processing: Processing | None = None            #: the bound processing (None: Processing.default())

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 of the weight files (module docstring): identifies the weights in every result."""
        return self.checkpoint.fingerprint()

    @property
    def raw(self) -> Weights:
        """The unprocessed weights (built from the files on first access, then kept)."""
        none = Processing.none()
        if none not in self._processed:         # kept with the processed weights: shared by bound copies
            self._processed[none] = self.checkpoint.raw(self.dtype, self.device)
        return self._processed[none]

    def bound(self, processing: Processing | None) -> "Model":
        """This model bound to `processing` (``None``: the default), sharing files and caches."""
        if processing == self.processing:
            return self
        other = copy.copy(self)             # shallow: the checkpoint, tokenizer and caches are shared
        other.processing = processing
        return other

    def resolved_processing(self, processing: Processing | None = None) -> Processing:
        """`processing` (default: the bound one, else the seed studies') with the options that are
        exact for this family only."""
        if processing is None:
            processing = Processing.default() if self.processing is None else self.processing
        return processing.applicable(self.cfg)

    def weights(self, processing: Processing | None = None) -> Weights:
        """Weights under `processing` (default: the bound processing), cached.

        Built block by block from the files in float32 (float64 for a float64 model),
        then cast to the model's dtype and moved to its device.
        """
        processing = self.resolved_processing(processing)
        if processing == Processing.none():
            return self.raw
        if processing not in self._processed:
            self._processed[processing] = self.checkpoint.processed(processing, self.dtype, self.device)
        return self._processed[processing]

    def derived(self, name: str, build: Callable[[Weights], object]):
        """``build(self.weights())``, computed once per (`name`, bound processing) and kept
        beside the processed weights (e.g. the float64 layer-0 view, :func:`headscope.layer0.view`).
        Callers must not modify what it returns."""
        processing = self.resolved_processing()
        key = (name, processing)
        if key not in self._derived:
            self._derived[key] = build(self.weights(processing))
        return self._derived[key]

    def raw_block(self, layer: int) -> Block:
        """The raw (unprocessed) weights of block `layer`, a copy the caller may modify."""
        return self.checkpoint.raw_block(self.cfg.check_layer(layer), self.dtype, self.device)

    def save(self, out: str | os.PathLike, *, blocks: dict[int, Block] | None = None,
             extra_files: dict[str, str] | None = None) -> Path:
        """Write this checkpoint to `out` with the raw blocks in `blocks` replacing the model's.

        The tokenizer files are copied from the model's directory; `extra_files` (name →
        text) are added. The rest of the weights are the model's own, copied tensor by
        tensor from its files (float32, ``transformer.`` keys, ``lm_head.weight`` when
        untied), so the model is never held twice.
        """
        replaced = {self.cfg.check_layer(l): b for l, b in (blocks or {}).items()}
        ckpt = self.checkpoint
        family = ckpt.family

        def tensor(key: str) -> torch.Tensor:
            name = family.canonical(key)
            layer, leaf = family.layer_leaf(name)
            if layer in replaced:
                return family.hf_from_block(replaced[layer], leaf, self.cfg)
            return ckpt.read([name], torch.float32)[name]

        return _write_checkpoint(Path(out), self.cfg, family, untied=ckpt.untied, tensor=tensor,
                                 tokenizer_from=self.directory, extra_files=extra_files)

    def to_tokens(self, text: str, prepend_bos: bool = True) -> torch.Tensor:
        """Token ids [pos] of `text`, with BOS (``<|endoftext|>``) prepended."""
        ids = self.tokenizer.encode(text)
        if prepend_bos:
            ids = [self.bos_id] + ids
        return torch.tensor(ids, dtype=torch.long)

    def to_str_tokens(self, ids) -> list[str]:
        return to_str_tokens(self.tokenizer, ids)

    @functools.cached_property
    def bos(self) -> dict:
        """The BOS headscope prepends and why (:mod:`headscope.core.bos`): token, id, source."""
        return bos_record(self.tokenizer, self.cfg.family, self.cfg.d_vocab, self.config_bos)

    @property
    def bos_id(self) -> int:
        return self.bos["id"]

    @property
    def n_parameters(self) -> int:
        """Parameters of the GPT-2 (W_U counted once when tied to W_E; mask buffers not)."""
        return self.checkpoint.n_parameters

    def describe(self) -> dict:
        c = self.cfg
        return {
            "source": self.source,
            "directory": str(self.directory),
            "fingerprint": self.fingerprint,
            "config": c.to_dict(),
            "n_parameters": self.n_parameters,
            "dtype": str(self.dtype).replace("torch.", ""),
            "tokenizer_vocab": len(self.tokenizer),
            "bos": self.bos,
            "processing_default": Processing.default().applicable(c).to_dict(),
        }


def file_sha256(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# -- where the stored tensors live ------------------------------------------------------


class _Source:
    """Stored tensors: ``infos`` (stored key → (dtype name, shape)) and :meth:`open`.

    ``open()`` is a context yielding ``get(key) -> Tensor``; the tensors it returns may
    be views of a memory map, valid after the context closes but keeping the map's
    touched pages resident while referenced: callers copy what they keep.
    """

    layout: str
    files: tuple[Path, ...] = ()
    in_memory: bool = False          # tensors are owned by the caller's state dict, not mapped files
    infos: dict[str, tuple[str, tuple[int, ...]]]

    def open(self) -> contextlib.AbstractContextManager[Callable[[str], torch.Tensor]]:
        raise NotImplementedError


def _corrupt(path: Path, e: Exception) -> HeadscopeError:
    return HeadscopeError(f"{path} is truncated or corrupt: {(str(e).splitlines() or [type(e).__name__])[0]}")


class _SafetensorsSource(_Source):
    def __init__(self, directory: Path, names: list[str], weight_map: dict[str, str] | None = None):
        self.directory = directory
        self.layout = "safetensors" if weight_map is None else "sharded"
        self.files = tuple(directory / n for n in sorted(names))
        self.infos, self.key_file = {}, {}
        for path in self.files:
            try:
                with safe_open(str(path), "pt") as f:
                    for key in f.keys():
                        sl = f.get_slice(key)
                        dtype = _ST_DTYPE_NAMES.get(sl.get_dtype(), sl.get_dtype().lower())
                        if key in self.key_file:
                            raise HeadscopeError(
                                f"{directory}: {key!r} is stored twice, in {self.key_file[key]} and {path.name}")
                        self.infos[key] = (dtype, tuple(sl.get_shape()))
                        self.key_file[key] = path.name
            except (SafetensorError, OSError, ValueError, RuntimeError) as e:
                raise _corrupt(path, e) from None
        if weight_map is not None:
            for key, name in sorted(weight_map.items()):
                if self.key_file.get(key) != name:
                    raise HeadscopeError(f"{directory / INDEX_FILE} lists {key!r} in {name}, which does not hold it")
            for key, name in sorted(self.key_file.items()):
                if key not in weight_map:
                    raise HeadscopeError(f"{directory / name} holds {key!r}, which {INDEX_FILE} does not list")

    @contextlib.contextmanager
    def open(self) -> Iterator[Callable[[str], torch.Tensor]]:
        with contextlib.ExitStack() as stack:
            handles = {}

            def get(key: str) -> torch.Tensor:
                name = self.key_file[key]
                try:
                    if name not in handles:
                        handles[name] = stack.enter_context(safe_open(str(self.directory / name), "pt"))
                    return handles[name].get_tensor(key)
                except (SafetensorError, OSError, ValueError, RuntimeError) as e:
                    raise _corrupt(self.directory / name, e) from None

            yield get


def _torch_load(path: Path, mmap: bool) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        raise HeadscopeError(
            f"{path} holds more than plain tensors and is refused (torch.load(weights_only=True): "
            f"{(str(e).splitlines() or ['refused'])[0]})") from None
    except (RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile) as e:
        raise _corrupt(path, e) from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise HeadscopeError(f"{path} is not a state dict (expected a dict of name → tensor)")
    return state


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class _BinSource(_Source):
    """``pytorch_model.bin``: memory-mapped per read (zip format) or held whole (legacy format)."""

    layout = "bin"

    def __init__(self, path: Path):
        self.path = path
        self.files = (path,)
        self.zip = zipfile.is_zipfile(path)
        state = _torch_load(path, mmap=self.zip)
        self.infos = {k: (_dtype_name(v.dtype), tuple(v.shape)) for k, v in state.items()}
        self._state = None if self.zip else state

    @contextlib.contextmanager
    def open(self) -> Iterator[Callable[[str], torch.Tensor]]:
        state = self._state if self._state is not None else _torch_load(self.path, mmap=True)
        yield state.__getitem__


class _DictSource(_Source):
    layout = "state_dict"
    in_memory = True

    def __init__(self, state: dict[str, torch.Tensor], family: Family = GPT2):
        state = {k: v.detach() for k, v in state.items()}
        embed = family.top["W_E"]
        lm, wte = state.get(family.unembed), state.get(embed, state.get(family.prefix + embed))
        if lm is not None and wte is not None and lm.shape == wte.shape and torch.equal(lm, wte):
            del state[family.unembed]                # transformers' state_dict() lists a tied lm_head too
        self.state = state
        self.infos = {k: (_dtype_name(v.dtype), tuple(v.shape)) for k, v in state.items()}

    @contextlib.contextmanager
    def open(self) -> Iterator[Callable[[str], torch.Tensor]]:
        yield self.state.__getitem__


def _weight_map(directory: Path) -> dict[str, str]:
    """``weight_map`` of model.safetensors.index.json: key → shard file name (checked)."""
    path = directory / INDEX_FILE
    index = read_json_file(path, "shard index", limit=CHECKPOINT_FILE_LIMIT)   # a huge index is refused unread
    wm = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wm, dict) or not wm or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise HeadscopeError(f"{path}: expected a 'weight_map' object of tensor name → shard file")
    for name in sorted(set(wm.values())):
        if Path(name).name != name or name in (".", "..") or "\\" in name or not name.endswith(".safetensors"):
            raise HeadscopeError(f"{path}: shard {name!r} is not a .safetensors file name in the checkpoint directory")
    return wm


def _present(path: Path) -> bool:
    """Whether the weight file `path` is there: a regular file (or a link to one) → True, nothing → False;
    anything else (a FIFO, a device, a dangling link) is refused, never passed over for another file."""
    if not os.path.lexists(path):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise HeadscopeError(f"{path} cannot be read ({e.strerror}); headscope does not fall back to another "
                             "weight file beside it") from None
    if not stat.S_ISREG(mode):
        raise HeadscopeError(f"{path} is {kind_of(mode)}, not a regular file; headscope reads only regular files "
                             "and does not fall back to another weight file beside it")
    return True


def _open_source(directory: Path) -> _Source:
    d = Path(directory)
    if _present(d / WEIGHTS_FILE):
        return _SafetensorsSource(d, [WEIGHTS_FILE])
    if _present(d / INDEX_FILE):
        wm = _weight_map(d)
        for name in sorted(set(wm.values())):
            if not (d / name).is_file():
                raise HeadscopeError(f"{d}: missing shard {name} (listed in {INDEX_FILE})")
        return _SafetensorsSource(d, sorted(set(wm.values())), wm)
    if _present(d / BIN_FILE):
        return _BinSource(d / BIN_FILE)
    if (d / (BIN_FILE + ".index.json")).exists():
        raise HeadscopeError(f"{d}: sharded pytorch_model.bin files are not supported (convert them to safetensors)")
    pickles = [n for n in ("model.pt", "model.ckpt") if (d / n).exists()]
    if pickles:
        raise HeadscopeError(
            f"{d} holds only a pickle checkpoint ({pickles[0]}); headscope reads model.safetensors, "
            f"sharded safetensors or {BIN_FILE} (convert with transformers' save_pretrained(safe_serialization=True))")
    raise HeadscopeError(f"missing {WEIGHTS_FILE} in {d} (nor {INDEX_FILE} or {BIN_FILE})")


# -- the validated checkpoint -------------------------------------------------------------


def _max_abs(t: torch.Tensor, chunk: int = 1 << 22) -> float:
    """max |t| in bounded temporaries; NaN or inf if any entry is not finite (max propagates NaN)."""
    m = 0.0
    for c in t.reshape(-1).split(chunk):
        v = float(c.abs().amax()) if c.numel() else 0.0
        if not math.isfinite(v):
            return v
        m = max(m, v)
    return m


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

    def __init__(self, source: _Source, cfg: Config, *, family: Family = GPT2, tie_word_embeddings: bool = True,
                 where: str = "checkpoint"):
        self.source, self.cfg, self.family, self.where = source, cfg, family, where
        self.names: dict[str, str] = {}
        unembed, buffers = family.unembed, family.buffers
        for key in sorted(source.infos):
            name = family.canonical(key)
            layer, leaf = family.layer_leaf(name)
            known = (name in family.top.values() or leaf in family.leaves or leaf in buffers
                     or name in family.top_buffers or (name == unembed and key == name))
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
        return cls(_open_source(directory), cfg, family=family, tie_word_embeddings=tie_word_embeddings,
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
        (computed once: every :meth:`Model.bound` copy shares this checkpoint)."""
        if getattr(self, "_fingerprint", None) is None:
            self._fingerprint = self._hash_files()
        return self._fingerprint

    def _hash_files(self) -> str:
        files = self.source.files
        if not files:
            raise HeadscopeError("weights held in memory have no file fingerprint")
        if len(files) == 1:
            return file_sha256(files[0])
        lines = "".join(f"{file_sha256(p)}  {p.name}\n" for p in sorted(files, key=lambda p: p.name))
        return hashlib.sha256(lines.encode("utf-8")).hexdigest()

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
                            f"{bound:.3g} within which float32 analyses of a model of this shape cannot overflow "
                            "(README, JSON notes: finite weights, finite figures)")
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
        stored = self.read(list(f.top.values()) + ([f.unembed] if self.untied else []), dtype, device, share=share)
        top = {field: stored[name] for field, name in f.top.items()}
        W_U = (stored[f.unembed] if self.untied else top["W_E"]).T   # [d_vocab d] → [d d_vocab]
        del stored
        if f.top_from_hf is not None:
            top = {field: f.top_from_hf(field, t, self.cfg) for field, t in top.items()}
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
                       b_U=torch.zeros(self.cfg.d_vocab, dtype=dtype, device=device))

    def processed(self, processing: Processing, dtype: torch.dtype, device=None) -> Weights:
        """Processed weights, built block by block on the CPU in float32 (float64 for a float64
        model), each block cast to `dtype` and moved to `device` as soon as it is done."""
        work = torch.float64 if dtype == torch.float64 else torch.float32
        move = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731 - no copy when nothing changes
        top, W_U = self._top(work)
        # W_U first: a tied W_U reads the raw W_E, which is then centred in place (no second copy)
        W_U, b_U, ln_w, ln_b = process_unembed(W_U, torch.zeros(self.cfg.d_vocab, dtype=work),
                                               top["ln_final_w"], top["ln_final_b"], processing)
        if not W_U.is_contiguous() or W_U.data_ptr() == top["W_E"].data_ptr():
            W_U = W_U.clone(memory_format=torch.contiguous_format)   # processing left W_U alone: a dense raw copy
        W_E, W_pos = process_embed(top["W_E"], top.get("W_pos"), processing, inplace=True)
        del top
        W_E, W_U, b_U, ln_w, ln_b = map(move, (W_E, W_U, b_U, ln_w, ln_b))
        W_pos = move(W_pos) if W_pos is not None else None          # rotary models have no W_pos
        blocks = []
        for l in range(self.cfg.n_layers):
            b = process_block(self.raw_block(l, work), processing)
            blocks.append(Block(**{k: move(getattr(b, k)) for k in b.shapes(self.cfg)}))
            del b
            _return_free_memory()
        return Weights(cfg=self.cfg, W_E=W_E, W_pos=W_pos, blocks=blocks, ln_final_w=ln_w, ln_final_b=ln_b,
                       W_U=W_U, b_U=b_U, processing=processing)




# -- resolving a model argument to a directory ----------------------------------------


def resolve(model: str | os.PathLike, revision: str | None = None) -> tuple[Path, str]:
    """Return (directory, source description) for a hub id or a local directory.

    A path that exists is used as it is and nothing touches the network. Anything
    else is treated as a hub id and fetched through huggingface_hub (its cache, its
    progress bars) at `revision` (a branch, tag or commit; default main); with
    ``HF_HUB_OFFLINE=1`` only the local cache is consulted.
    """
    p = Path(model).expanduser()
    try:
        str(p).encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes (surrogate escapes): the safetensors reader takes UTF-8 paths only
        shown = str(p).encode("utf-8", "backslashreplace").decode("utf-8")
        raise HeadscopeError(f"checkpoint path {shown} is not valid UTF-8 (its undecodable bytes are shown as "
                             "surrogate escapes); headscope cannot open it: rename it or link to it from a UTF-8 "
                             "path") from None
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise HeadscopeError(f"--revision: expected a branch, tag or commit name, got {revision!r}")
    if p.exists():
        if not p.is_dir():
            raise HeadscopeError(f"{p} is not a checkpoint directory (expected a folder with config.json)")
        if revision is not None:
            raise HeadscopeError(f"--revision {revision} applies to hub ids, but {p} is a local directory")
        return p.resolve(), f"local:{p.resolve()}"
    s = str(model)
    if s.startswith((".", "/", "~")) or s.count("/") > 1 or not s.strip():
        raise HeadscopeError(f"no such checkpoint directory: {s}")
    return _download(s, revision), f"hub:{s}" + (f"@{revision}" if revision is not None else "")


def _download(repo_id: str, revision: str | None = None) -> Path:
    """Fetch what the repo's layout needs: config, the weights (model.safetensors; else the
    index and its shards; else pytorch_model.bin), the tokenizer files."""
    import huggingface_hub
    from huggingface_hub import constants as hf_constants
    from huggingface_hub import errors as hf_errors

    offline = hf_constants.HF_HUB_OFFLINE
    what = repr(repo_id) + (f" at revision {revision!r}" if revision is not None else "")

    def fetch(filename: str, required: bool) -> Path | None:
        try:
            return Path(huggingface_hub.hf_hub_download(repo_id, filename, revision=revision))
        except hf_errors.LocalEntryNotFoundError:
            if not required:
                return None
            if offline:
                raise HeadscopeError(
                    f"{what} is not in the local Hugging Face cache ({filename} missing) "
                    "and HF_HUB_OFFLINE=1 forbids downloading it"
                ) from None
            raise HeadscopeError(
                f"cannot download {what}: the hub is unreachable and it is not cached"
            ) from None
        except hf_errors.EntryNotFoundError:
            if required:
                raise HeadscopeError(f"hub model {what} has no {filename}") from None
            return None
        except hf_errors.RevisionNotFoundError:
            raise HeadscopeError(f"hub model {repo_id!r} has no revision {revision!r}") from None
        except (hf_errors.RepositoryNotFoundError, hf_errors.GatedRepoError):
            raise HeadscopeError(f"unknown hub model id {repo_id!r}") from None
        except hf_errors.HfHubHTTPError as e:
            raise HeadscopeError(f"cannot download {what}: {str(e).splitlines()[0]}") from None
        except ValueError as e:  # malformed repo id or revision
            raise HeadscopeError(f"not a hub model id or a directory: {repo_id!r} ({str(e).splitlines()[0]})") from None

    config = fetch("config.json", required=True)
    if fetch(WEIGHTS_FILE, required=False) is None:
        index = fetch(INDEX_FILE, required=False)
        if index is not None:
            for name in sorted(set(_weight_map(index.parent).values())):
                fetch(name, required=True)
        elif fetch(BIN_FILE, required=False) is None:
            raise HeadscopeError(
                f"{what} has no {WEIGHTS_FILE}, {INDEX_FILE} or {BIN_FILE}"
                + (" in the local cache (HF_HUB_OFFLINE=1)" if offline else "")
            )
    if fetch("tokenizer.json", required=False) is None:
        fetch("vocab.json", required=True)
        fetch("merges.txt", required=True)
    return config.parent


# -- reading a directory --------------------------------------------------------------


def load_checkpoint(
    model: str | os.PathLike,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    revision: str | None = None,
) -> Model:
    """Load a checkpoint by hub id (at `revision`) or directory (``headscope.load`` for paths).

    Reads config.json (its family validates it: :mod:`headscope.core.families`), the weight
    files' headers and the tokenizer, and checks every weight is finite; the weights
    themselves are built on demand (:class:`Model`).
    """
    check_dtype(dtype)
    check_device(device)
    directory, source = resolve(model, revision)
    refuse_unfinished(directory)        # never a half-committed mix of two outputs
    hf = read_hf_config(directory / "config.json")
    family, cfg = read_config(hf)
    ckpt = Checkpoint.open(directory, cfg, family=family, tie_word_embeddings=family.tied(hf))
    tokenizer = load_tokenizer(directory, cfg.family)
    check_tokenizer(tokenizer, cfg.d_vocab, directory, cfg.family)
    ckpt.check_values()
    return Model(cfg=cfg, checkpoint=ckpt, tokenizer=tokenizer, source=source, directory=directory,
                 device=torch.device(device), dtype=dtype, config_bos=hf.get("bos_token_id"))


def check_dtype(dtype) -> None:
    """Refuse (:class:`BadArgument`, a ValueError) anything but a floating torch dtype headscope computes in."""
    if not isinstance(dtype, torch.dtype) or dtype not in FLOAT_DTYPES.values():
        raise BadArgument(expected_got("dtype", f"one of {', '.join(FLOAT_DTYPES)} (torch dtypes)",
                                       f"{dtype!r} ({type(dtype).__name__})"))


def check_device(device) -> None:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise BadArgument(f"--device {device!r} is not a torch device (expected cpu, cuda, cuda:1, mps)") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise BadArgument(expected_got(f"--device {device}", "cpu, cuda, cuda:N or mps (devices that compute)",
                                       dev.type))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise HeadscopeError(f"--device {device}: CUDA is not available on this machine")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise HeadscopeError(f"--device {device}: MPS is not available on this machine")


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
    return Checkpoint(_DictSource(state, family), cfg, family=family, tie_word_embeddings=tie_word_embeddings,
                      where=where)


# -- writing ----------------------------------------------------------------------------


def _hf_from_weights(w: Weights, key: str, family: Family = GPT2) -> torch.Tensor:
    name = family.canonical(key)
    layer, leaf = family.layer_leaf(name)
    if layer is not None:
        return family.hf_from_block(w.blocks[layer], leaf, w.cfg)
    field = {n: f for f, n in family.top.items()}
    t = w.W_U.T if name == family.unembed else getattr(w, field[name])
    if family.top_to_hf is not None and name != family.unembed:
        t = family.top_to_hf(field[name], t, w.cfg)                  # e.g. OPT's position table: + 2 rows
    return t.detach().to("cpu", torch.float32).contiguous()


def _check_writable(w: Weights) -> bool:
    """Whether `w` is untied; refuses what a checkpoint of its family cannot hold."""
    if w.processing != Processing.none():
        raise HeadscopeError("only raw weights can be written as a checkpoint")
    if bool(w.b_U.abs().max() > 0):
        raise HeadscopeError("checkpoints of the families headscope writes have no b_U (unembedding bias)")
    return not w.tied


def to_hf_state_dict(w: Weights) -> dict[str, torch.Tensor]:
    """Canonical raw weights → HF GPT-2 state dict (``transformer.`` prefix; ``lm_head.weight``
    only when W_U is not W_Eᵀ), float32 on the CPU."""
    untied = _check_writable(w)
    return {k: _hf_from_weights(w, k) for k, _ in GPT2.write_keys(w.cfg, untied)}


def _write_checkpoint(out: Path, cfg: Config, family: Family, *, untied: bool, tensor: Callable[[str], torch.Tensor],
                      tokenizer_from: Path | None, extra_files: dict[str, str] | None) -> Path:
    import json

    hf = family.hf_config(cfg, untied)
    with atomic_directory(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
        write_safetensors(tmp / WEIGHTS_FILE, [(k, torch.float32, s) for k, s in family.write_keys(cfg, untied)], tensor,
                          metadata={"format": "pt"})
        copied = False
        if tokenizer_from is not None:
            for name in TOKENIZER_FILES:
                src = Path(tokenizer_from) / name
                if src.is_file():
                    shutil.copyfile(src, tmp / name)
                    copied = True
        if not copied:
            vocab, merges = gpt2_bpe_files()
            shutil.copyfile(vocab, tmp / "vocab.json")
            shutil.copyfile(merges, tmp / "merges.txt")
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
    return out


def save_checkpoint(
    w: Weights,
    out: Path,
    *,
    tokenizer_from: Path | None = None,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Write a complete HF GPT-2 checkpoint directory atomically.

    Files are staged and committed under headscope's output rule (:mod:`headscope._atomic`):
    `out` must be new, empty or an earlier headscope output; other files in it are kept,
    and a crash leaves no half-written checkpoint (the next write finishes or drops it).
    The weights are streamed tensor by tensor (float32, ``transformer.`` keys; ``lm_head.weight`` and
    ``tie_word_embeddings: false`` when W_U is not W_Eᵀ). Tokenizer files are copied
    from `tokenizer_from` (a checkpoint directory) or, by default, are GPT-2's BPE.
    """
    untied = _check_writable(w)
    family = FAMILIES[w.cfg.family]
    return _write_checkpoint(Path(out), w.cfg, family, untied=untied, tensor=lambda k: _hf_from_weights(w, k, family),
                             tokenizer_from=tokenizer_from, extra_files=extra_files)
