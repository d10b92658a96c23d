"""Checkpoints → canonical weights: hub ids, local directories, the offline HF cache.

A checkpoint is a Hugging Face GPT-2 directory: ``config.json``, ``model.safetensors``
and tokenizer files. Only safetensors are read; a directory holding only a pickle
(``pytorch_model.bin``) is refused, since unpickling can run code. No remote code is
ever trusted.

HF's GPT-2 stores its linear layers as ``Conv1D`` with weight [in out], so
``y = x @ W + b`` already in headscope's right-multiplying convention; ``c_attn``
holds Q, K and V side by side: [d_model 3·d_model] → three [d_model d_model] blocks,
each reshaped to [head d_model d_head].
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ._errors import HeadscopeError, expected_got
from .config import Config, read_config
from ._atomic import atomic_directory
from .tokenizer import TOKENIZER_FILES, gpt2_bpe_files, load_tokenizer, to_str_tokens
from .weights import Block, Processing, Weights, process

#: hub ids that are GPT-2 family checkpoints with safetensors on the hub.
KNOWN_HUB_IDS = (
    "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "distilgpt2",
    "openai-community/gpt2", "openai-community/gpt2-medium",
    "openai-community/gpt2-large", "openai-community/gpt2-xl",
    "distilbert/distilgpt2",
)
WEIGHTS_FILE = "model.safetensors"


@dataclasses.dataclass
class Model:
    """A loaded checkpoint: config, raw weights, tokenizer, and where it came from."""

    cfg: Config
    raw: Weights
    tokenizer: object
    source: str
    directory: Path
    _processed: dict = dataclasses.field(default_factory=dict, repr=False)

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 of model.safetensors: identifies the weights in every result."""
        return file_sha256(self.directory / WEIGHTS_FILE)

    def weights(self, processing: Processing | None = None) -> Weights:
        """Weights under `processing` (default: the seed studies' processing), cached."""
        processing = Processing.default() if processing is None else processing
        if processing == Processing.none():
            return self.raw
        if processing not in self._processed:
            self._processed[processing] = process(self.raw, processing)
        return self._processed[processing]

    def raw_block(self, layer: int) -> Block:
        """The raw (unprocessed) weights of block `layer`, a copy the caller may modify."""
        b = self.raw.blocks[self.cfg.check_layer(layer)]
        return Block(**{k: getattr(b, k).clone() for k in b.shapes(self.cfg)})

    def save(self, out: str | os.PathLike, *, blocks: dict[int, Block] | None = None,
             extra_files: dict[str, str] | None = None) -> Path:
        """Write this checkpoint to `out` with the raw blocks in `blocks` replacing the model's.

        The tokenizer files are copied from the model's directory; `extra_files` (name →
        text) are added. The rest of the weights are the model's own.
        """
        replaced = list(self.raw.blocks)
        for l, b in (blocks or {}).items():
            replaced[self.cfg.check_layer(l)] = b
        w = dataclasses.replace(self.raw, blocks=replaced)
        return save_checkpoint(w.to(dtype=torch.float32), Path(out), tokenizer_from=self.directory,
                               extra_files=extra_files)

    def to_tokens(self, text: str, prepend_bos: bool = True) -> torch.Tensor:
        """Token ids [pos] of `text`, with BOS (``<|endoftext|>``) prepended."""
        ids = self.tokenizer.encode(text)
        if prepend_bos:
            ids = [self.bos_id] + ids
        return torch.tensor(ids, dtype=torch.long)

    def to_str_tokens(self, ids) -> list[str]:
        return to_str_tokens(self.tokenizer, ids)

    @property
    def bos_id(self) -> int:
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return int(bos) if bos is not None else self.cfg.d_vocab - 1

    def describe(self) -> dict:
        c = self.cfg
        return {
            "source": self.source,
            "directory": str(self.directory),
            "fingerprint": self.fingerprint,
            "config": c.to_dict(),
            "n_parameters": self.raw.n_parameters,
            "dtype": str(self.raw.dtype).replace("torch.", ""),
            "tokenizer_vocab": len(self.tokenizer),
            "processing_default": Processing.default().to_dict(),
        }


def file_sha256(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# -- resolving a model argument to a directory ----------------------------------------


def resolve(model: str | os.PathLike) -> tuple[Path, str]:
    """Return (directory, source description) for a hub id or a local directory.

    A path that exists is used as it is and nothing touches the network. Anything
    else is treated as a hub id and fetched through huggingface_hub (its cache, its
    progress bars); with ``HF_HUB_OFFLINE=1`` only the local cache is consulted.
    """
    p = Path(model).expanduser()
    if p.exists():
        if not p.is_dir():
            raise HeadscopeError(f"{p} is not a checkpoint directory (expected a folder with config.json)")
        return p.resolve(), f"local:{p.resolve()}"
    s = str(model)
    if s.startswith((".", "/", "~")) or s.count("/") > 1 or not s.strip():
        raise HeadscopeError(f"no such checkpoint directory: {s}")
    return _download(s), f"hub:{s}"


def _download(repo_id: str) -> Path:
    import huggingface_hub
    from huggingface_hub import errors as hf_errors

    from huggingface_hub import constants as hf_constants

    offline = hf_constants.HF_HUB_OFFLINE

    def fetch(filename: str, required: bool) -> Path | None:
        try:
            return Path(huggingface_hub.hf_hub_download(repo_id, filename))
        except hf_errors.LocalEntryNotFoundError:
            if not required:
                return None
            if offline:
                raise HeadscopeError(
                    f"{repo_id!r} is not in the local Hugging Face cache ({filename} missing) "
                    "and HF_HUB_OFFLINE=1 forbids downloading it"
                ) from None
            raise HeadscopeError(
                f"cannot download {repo_id!r}: the hub is unreachable and it is not cached"
            ) from None
        except hf_errors.EntryNotFoundError:
            if required:
                raise HeadscopeError(f"hub model {repo_id!r} has no {filename}") from None
            return None
        except (hf_errors.RepositoryNotFoundError, hf_errors.GatedRepoError):
            raise HeadscopeError(f"unknown hub model id {repo_id!r}") from None
        except hf_errors.HfHubHTTPError as e:
            raise HeadscopeError(f"cannot download {repo_id!r}: {str(e).splitlines()[0]}") from None
        except ValueError as e:  # malformed repo id
            raise HeadscopeError(f"not a hub model id or a directory: {repo_id!r} ({e})") from None

    config = fetch("config.json", required=True)
    if fetch(WEIGHTS_FILE, required=False) is None:
        raise HeadscopeError(
            f"{repo_id!r} has no {WEIGHTS_FILE} (headscope reads safetensors only)"
            + ("; it is not in the local cache" if offline else "")
        )
    if fetch("tokenizer.json", required=False) is None:
        fetch("vocab.json", required=True)
        fetch("merges.txt", required=True)
    return config.parent


# -- reading a directory --------------------------------------------------------------


def load(
    model: str | os.PathLike,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    tokenizer=None,
) -> Model:
    """Load a GPT-2-family checkpoint by hub id or directory, or a transformers GPT-2 model object.

    >>> model = headscope.load("gpt2")              # doctest: +SKIP
    >>> W = model.weights()                         # processed, TransformerLens names
    """
    if not isinstance(model, (str, os.PathLike)):   # in memory: headscope.in_memory (tokenizer= is for it)
        from .in_memory import from_transformers
        return from_transformers(model, device=device, dtype=dtype, tokenizer=tokenizer)
    if tokenizer is not None:
        raise HeadscopeError("tokenizer= is for a model in memory; a checkpoint brings its own tokenizer")
    check_device(device)
    directory, source = resolve(model)
    cfg = read_config(directory / "config.json")
    state = read_safetensors(directory)
    raw = from_hf_state_dict(state, cfg).to(device=device, dtype=dtype).validate()
    tokenizer = load_tokenizer(directory)
    if len(tokenizer) != cfg.d_vocab:
        raise HeadscopeError(
            expected_got("tokenizer vocabulary size (W_E rows)", cfg.d_vocab, len(tokenizer))
        )
    return Model(cfg=cfg, raw=raw, tokenizer=tokenizer, source=source, directory=directory)


def check_device(device) -> None:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise HeadscopeError(f"--device {device!r} is not a torch device (expected cpu, cuda, cuda:1, mps)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise HeadscopeError(f"--device {device}: CUDA is not available on this machine")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise HeadscopeError(f"--device {device}: MPS is not available on this machine")


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    path = Path(directory) / WEIGHTS_FILE
    if not path.is_file():
        pickles = [n for n in ("pytorch_model.bin", "model.pt", "model.ckpt") if (Path(directory) / n).exists()]
        if pickles:
            raise HeadscopeError(
                f"{directory} holds only a pickle checkpoint ({pickles[0]}); headscope reads "
                "model.safetensors only (convert with transformers' save_pretrained(safe_serialization=True))"
            )
        if (Path(directory) / "model.safetensors.index.json").exists():
            raise HeadscopeError(f"{directory}: sharded safetensors are not supported yet")
        raise HeadscopeError(f"missing {WEIGHTS_FILE} in {directory}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise HeadscopeError(f"{path} is truncated or corrupt: {str(e).splitlines()[0]}") from None


def _strip_prefix(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in state.items():
        out[k[len("transformer."):] if k.startswith("transformer.") else k] = v
    return out


def from_hf_state_dict(state: dict[str, torch.Tensor], cfg: Config) -> Weights:
    """HF GPT-2 state dict → canonical :class:`Weights`, every shape asserted."""
    s = _strip_prefix(state)
    d, h, e, m = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in s:
            raise HeadscopeError(f"checkpoint is missing tensor {name!r}")
        t = s[name]
        if tuple(t.shape) != shape:
            raise HeadscopeError(expected_got(f"shape of {name}", list(shape), list(t.shape)))
        return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t

    blocks = []
    for l in range(cfg.n_layers):
        p = f"h.{l}."
        c_attn_w = get(p + "attn.c_attn.weight", (d, 3 * d))  # Conv1D: [in out]
        c_attn_b = get(p + "attn.c_attn.bias", (3 * d,))
        W_Q, W_K, W_V = (w.reshape(d, h, e).permute(1, 0, 2) for w in c_attn_w.split(d, dim=1))  # [d h*e] → [h d e]
        b_Q, b_K, b_V = (b.reshape(h, e) for b in c_attn_b.split(d))                            # [h*e] → [h e]
        W_O = get(p + "attn.c_proj.weight", (d, d)).reshape(h, e, d)                            # [h*e d] → [h e d]
        blocks.append(Block(
            ln1_w=get(p + "ln_1.weight", (d,)), ln1_b=get(p + "ln_1.bias", (d,)),
            W_Q=W_Q.contiguous(), W_K=W_K.contiguous(), W_V=W_V.contiguous(),
            b_Q=b_Q.contiguous(), b_K=b_K.contiguous(), b_V=b_V.contiguous(),
            W_O=W_O.contiguous(), b_O=get(p + "attn.c_proj.bias", (d,)),
            ln2_w=get(p + "ln_2.weight", (d,)), ln2_b=get(p + "ln_2.bias", (d,)),
            W_in=get(p + "mlp.c_fc.weight", (d, m)), b_in=get(p + "mlp.c_fc.bias", (m,)),
            W_out=get(p + "mlp.c_proj.weight", (m, d)), b_out=get(p + "mlp.c_proj.bias", (d,)),
        ))
    W_E = get("wte.weight", (cfg.d_vocab, d))
    if "lm_head.weight" in state:
        W_U = state["lm_head.weight"]
        if tuple(W_U.shape) != (cfg.d_vocab, d):
            raise HeadscopeError(expected_got("shape of lm_head.weight", [cfg.d_vocab, d], list(W_U.shape)))
        W_U = W_U.float().T.contiguous()
    else:
        W_U = W_E.T.contiguous()  # tied: logits = x @ W_E.T
    return Weights(
        cfg=cfg, W_E=W_E, W_pos=get("wpe.weight", (cfg.n_ctx, d)), blocks=blocks,
        ln_final_w=get("ln_f.weight", (d,)), ln_final_b=get("ln_f.bias", (d,)),
        W_U=W_U, b_U=torch.zeros(cfg.d_vocab, dtype=W_E.dtype),
    )


def to_hf_state_dict(w: Weights) -> dict[str, torch.Tensor]:
    """Canonical raw weights → HF GPT-2 state dict (``transformer.`` prefix, tied head).

    Only raw (unprocessed) weights can be written: HF's architecture has no b_U and
    ties W_U to W_E.
    """
    if w.processing != Processing.none():
        raise HeadscopeError("only raw weights can be written as a GPT-2 checkpoint")
    cfg = w.cfg
    d = cfg.d_model
    if not torch.equal(w.W_U, w.W_E.T) or bool(w.b_U.abs().max() > 0):
        raise HeadscopeError("GPT-2 checkpoints tie W_U to W_E and have no b_U")
    out = {"transformer.wte.weight": w.W_E, "transformer.wpe.weight": w.W_pos}
    for l, b in enumerate(w.blocks):
        p = f"transformer.h.{l}."
        qkv = [W.permute(1, 0, 2).reshape(d, d) for W in (b.W_Q, b.W_K, b.W_V)]  # [h d e] → [d h*e]
        out[p + "attn.c_attn.weight"] = torch.cat(qkv, dim=1)
        out[p + "attn.c_attn.bias"] = torch.cat([x.reshape(d) for x in (b.b_Q, b.b_K, b.b_V)])
        out[p + "attn.c_proj.weight"] = b.W_O.reshape(d, d)                       # [h e d] → [h*e d]
        out[p + "attn.c_proj.bias"] = b.b_O
        out[p + "ln_1.weight"], out[p + "ln_1.bias"] = b.ln1_w, b.ln1_b
        out[p + "ln_2.weight"], out[p + "ln_2.bias"] = b.ln2_w, b.ln2_b
        out[p + "mlp.c_fc.weight"], out[p + "mlp.c_fc.bias"] = b.W_in, b.b_in
        out[p + "mlp.c_proj.weight"], out[p + "mlp.c_proj.bias"] = b.W_out, b.b_out
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = w.ln_final_w, w.ln_final_b
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in out.items()}


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
    and a crash leaves no half-written checkpoint (the next write finishes or drops it). Tokenizer files are copied from
    `tokenizer_from` (a checkpoint directory) or, by default, are GPT-2's BPE.
    """
    out = Path(out)
    with atomic_directory(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(w.cfg.to_hf_dict(), indent=2, sort_keys=True) + "\n")
        save_file(to_hf_state_dict(w), str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
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
