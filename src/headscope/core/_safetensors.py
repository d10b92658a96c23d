"""Writing a safetensors file one tensor at a time (the bytes of ``safetensors.torch.save_file``).

The format: an 8-byte little-endian header length, a JSON header
(``{"__metadata__": {…}, name: {"dtype", "shape", "data_offsets"}, …}``), then every
tensor's raw little-endian bytes. ``save_file`` orders the tensors by decreasing element
size, then by name, writes the header compactly with ``__metadata__`` first and pads it
with spaces to a multiple of 8 bytes; :func:`write_safetensors` does the same, so its
output is byte-identical, but it asks for each tensor only when its bytes are due and
drops it afterwards: writing a GPT-2 XL checkpoint holds one tensor at a time.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path
from typing import Callable, Iterable

import torch

from .._errors import HeadscopeError

#: torch dtype → safetensors dtype name, for the dtypes headscope writes.
DTYPE_NAMES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def write_safetensors(
    path: str | Path,
    entries: Iterable[tuple[str, torch.dtype, tuple[int, ...]]],
    tensor: Callable[[str], torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write the tensors named in `entries` (name, dtype, shape) to `path`.

    ``tensor(name)`` is called once per entry, in file order, and must return a tensor
    of exactly that dtype and shape (checked); it is written and released before the
    next one is asked for.
    """
    if sys.byteorder != "little":  # pragma: no cover - safetensors stores little-endian
        raise HeadscopeError("writing safetensors by hand needs a little-endian machine")
    size = {dt: torch.empty((), dtype=dt).element_size() for dt in DTYPE_NAMES}
    order = sorted(entries, key=lambda e: (-size[e[1]], e[0]))
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, dtype, shape in order:
        n = nbytes(dtype, tuple(shape))
        header[name] = {"dtype": DTYPE_NAMES[dtype], "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, dtype, shape in order:
            t = tensor(name)
            if t.dtype != dtype or tuple(t.shape) != tuple(shape):  # pragma: no cover - a bug, not bad input
                raise AssertionError(f"{name}: got {t.dtype} {list(t.shape)}, expected {dtype} {list(shape)}")
            t = t.detach().to("cpu").contiguous()
            f.write(t.reshape(-1).view(torch.uint8).numpy().data)
            del t
        if f.tell() != 8 + len(blob) + offset:  # pragma: no cover - a bug, not bad input
            raise AssertionError(f"{path}: wrote {f.tell()} bytes, expected {8 + len(blob) + offset}")
