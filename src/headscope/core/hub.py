"""A model argument → a checkpoint directory: a local path, or a hub id through the HF cache.

A path that exists is used as it is and nothing touches the network; anything else is a hub
id fetched by ``huggingface_hub`` (its cache; ``HF_HUB_OFFLINE=1`` consults the cache only).
"""

from __future__ import annotations

import os
from pathlib import Path

from .._errors import HeadscopeError
from .sources import BIN_FILE, INDEX_FILE, WEIGHTS_FILE, read_weight_map

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
            for name in sorted(set(read_weight_map(index.parent).values())):
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
