"""Where a checkpoint's tensors are stored: the weight files of a directory, or a state dict.

A checkpoint is a Hugging Face model directory: ``config.json``, the weights and the
tokenizer files (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``). The weights are
read from the first of these that exists:

1. ``model.safetensors``;
2. ``model.safetensors.index.json`` and the shards its ``weight_map`` names;
3. ``pytorch_model.bin``, read with ``torch.load(weights_only=True)``: plain tensors in a
   dict, never arbitrary unpickling (a pickle that asks for anything else is refused).
   A zip-format file (torch ≥ 1.6) is memory-mapped; a legacy one is read whole.

A source knows stored keys, dtypes and shapes and hands out tensors; what they mean is the
model family's (:mod:`headscope.core.families`), checked by :mod:`headscope.core.checkpoint`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import zipfile
from pathlib import Path
from typing import Callable, Iterator

import torch
from safetensors import SafetensorError, safe_open

from .._atomic import kind_of
from .._errors import HeadscopeError
from .._input import CHECKPOINT_FILE_LIMIT, read_json_file
from .families import GPT2, Family

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


def file_sha256(path: Path, chunk: int = 1 << 23) -> str:
    """sha256 hex digest of the file at `path`, read into one reused buffer (no fresh block per read).

    The read and the hash of each chunk release the GIL; 8 MB chunks keep the handful of GIL
    hand-overs between them negligible when another thread runs Python meanwhile
    (:meth:`~headscope.core.checkpoint.Checkpoint.prefetch_fingerprint`)."""
    h = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


# -- where the stored tensors live ------------------------------------------------------


class Source:
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

    def pin(self) -> None:
        """Remember what each weight file is now (device, inode, size, modification time)."""
        self._pins = {path: _identity(path) for path in self.files}

    def check_unchanged(self) -> None:
        """Refuse (one line) to read a weight file that is not the one pinned at load.

        A model reads its files lazily; a checkpoint re-planted or rewritten in place while it
        is in memory would otherwise mix two checkpoints (raw weights new, processed weights
        and config old). One model object sees one checkpoint.
        """
        for path, pinned in getattr(self, "_pins", {}).items():
            if _identity(path) != pinned:
                raise HeadscopeError(f"checkpoint file {path} changed after the model was loaded (replaced or "
                                     "rewritten); a loaded model reads only the checkpoint it loaded: load it again")


def _identity(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _corrupt(path: Path, e: Exception) -> HeadscopeError:
    return HeadscopeError(f"{path} is truncated or corrupt: {(str(e).splitlines() or [type(e).__name__])[0]}")


class _SafetensorsSource(Source):
    def __init__(self, directory: Path, names: list[str], weight_map: dict[str, str] | None = None):
        self.directory = directory
        self.layout = "safetensors" if weight_map is None else "sharded"
        self.files = tuple(directory / n for n in sorted(names))
        self.pin()
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
                        self.check_unchanged()
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


class _BinSource(Source):
    """``pytorch_model.bin``: memory-mapped per read (zip format) or held whole (legacy format)."""

    layout = "bin"

    def __init__(self, path: Path):
        self.path = path
        self.files = (path,)
        self.pin()
        self.zip = zipfile.is_zipfile(path)
        state = _torch_load(path, mmap=self.zip)
        self.infos = {k: (_dtype_name(v.dtype), tuple(v.shape)) for k, v in state.items()}
        self._state = None if self.zip else state

    @contextlib.contextmanager
    def open(self) -> Iterator[Callable[[str], torch.Tensor]]:
        if self._state is None:
            self.check_unchanged()
        state = self._state if self._state is not None else _torch_load(self.path, mmap=True)
        yield state.__getitem__


class DictSource(Source):
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


def read_weight_map(directory: Path) -> dict[str, str]:
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


def open_source(directory: Path) -> Source:
    d = Path(directory)
    if _present(d / WEIGHTS_FILE):
        return _SafetensorsSource(d, [WEIGHTS_FILE])
    if _present(d / INDEX_FILE):
        wm = read_weight_map(d)
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
