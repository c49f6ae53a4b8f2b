"""A GGUF file converted once into a Hugging Face checkpoint directory that later loads read.

transformers reads a GGUF file (its GGUF integration: "GGUF and interaction with Transformers"
in the transformers docs) by parsing the whole metadata, the tokenizer's vocabulary and merges
included, then mapping and dequantising every tensor. For SmolLM2-135M on 2 cores that is about
3.7 s per parse, paid by the config (twice), the weights and the tokenizer, plus 5 s of tensor
name mapping: about 25 s of every replica start, and 2-3x that while other replicas start.

The first load instead writes what transformers makes of the file: `config.json`, a
`generation_config.json` where the file has one, the tokenizer files (chat template included)
and the dequantised tensors as float32 safetensors (4 bytes per parameter: 540 MB for
SmolLM2-135M), under `~/.cache/ascend-router/gguf/<key>/`. Every later load (a second replica,
a restarted one, the next `serve run`) reads that directory: the same tensors bit for bit, in
about 2 s.

- The key hashes the file's resolved path, size and modification time, and the transformers
  version, so a replaced file or a different transformers converts again.
- A file lock per key: replicas starting together convert once; the others wait and read.
- The directory appears (atomic rename) only once complete, with a manifest (`MANIFEST`: the
  source file and each file's size) written last. A directory whose files do not match it
  (truncated, deleted) is converted again; so is one without it. An interrupted conversion
  leaves a temporary directory that the next conversion of the same key removes.
- A conversion removes the older ones of the same file (replaced, or touched), so the cache
  holds one copy per GGUF file. Files are written readable by all (0644), so a cache can be
  shared.
- The config is read and checked (`engine.model_loader.load_config`: a refused architecture,
  an unreadable file) before any weight is converted, and its errors are raised as they are.
- Files over `MAX_GGUF_BYTES` (their float32 copy would take tens of GB) and any later failure
  (unreadable tensors, a full disk) fall back to reading the GGUF file itself, as before, so a
  bad file gets the same error as without the cache.

`ASCEND_ROUTER_GGUF_CACHE` sets the cache directory; `off` turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from filelock import FileLock
from safetensors.torch import save_model
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from engine.checkpoint_ref import CheckpointRef
from engine.model_loader import load_config

logger = logging.getLogger(__name__)

CACHE_ENV = "ASCEND_ROUTER_GGUF_CACHE"
"""Environment variable: the cache directory, or `off`."""
DEFAULT_CACHE_DIR = "~/.cache/ascend-router/gguf"
MAX_GGUF_BYTES = 1 << 30
"""GGUF files larger than this (about 1B parameters at 4-8 bits) are read directly each time."""
FORMAT = "2"
"""Bumped when what a converted directory holds changes."""
MANIFEST = "gguf-cache.json"
"""Written last into a converted directory: `{"source": path, "files": {name: bytes}}`."""


def cache_dir() -> Path | None:
    """The cache directory (`~` expanded), or None when `ASCEND_ROUTER_GGUF_CACHE=off`."""
    value = os.environ.get(CACHE_ENV, DEFAULT_CACHE_DIR)
    return None if value.strip().lower() == "off" else Path(value).expanduser()


def cache_key(gguf: Path) -> str:
    """Hex key of a GGUF file's conversion: its resolved path, size and mtime (ns), the
    transformers version and `FORMAT`."""
    st = gguf.stat()
    ident = f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}|{transformers.__version__}|{FORMAT}"
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


class _NotConverted(Exception):
    """The conversion failed after the config was read; the GGUF file is read directly."""


def loadable(ref: CheckpointRef) -> CheckpointRef:
    """Where to load `ref` from: for a GGUF file, its converted directory (converting it first
    if no converted copy exists; `origin` names the GGUF file); otherwise, or when the cache is
    off, the file is too large or the conversion fails, `ref` itself.

    Raises:
        ValueError: from `engine.model_loader.load_config` (a refused architecture, a file
            transformers cannot read as a config). Any later failure is logged and the GGUF
            file is read directly.
    """
    root = cache_dir()
    if ref.gguf_file is None or root is None:
        return ref
    gguf = ref.directory / ref.gguf_file
    try:
        if gguf.stat().st_size > MAX_GGUF_BYTES:
            return ref
        key = cache_key(gguf)
        target = root / key
        if not _intact(target):
            root.mkdir(parents=True, exist_ok=True)
            with FileLock(str(root / f"{key}.lock")):
                if not _intact(target):  # another process may have converted it meanwhile
                    if target.exists():
                        logger.warning("GGUF cache: %s is damaged; converting again", target)
                        shutil.rmtree(target)
                    source = gguf.resolve()
                    _convert(ref, source, root, key)
                    _drop_older(root, key, str(source))
    except (_NotConverted, OSError) as exc:
        logger.warning("GGUF cache: %s is read directly (%s)", gguf, exc)
        return ref
    return CheckpointRef(target, None, origin=gguf)


def _convert(ref: CheckpointRef, source: Path, root: Path, key: str) -> None:
    """Write the converted directory `root/key` of `ref`, the GGUF file `source` (resolved),
    through a temporary directory.

    Raises:
        ValueError: see `loadable`.
        _NotConverted: anything failed after the config was read.
    """
    start = time.monotonic()
    config = load_config(ref)  # refusals and unreadable files first, before any weight
    tmp = root / f"{key}.tmp"
    kwargs = ref.kwargs()
    try:
        shutil.rmtree(tmp, ignore_errors=True)  # left by an interrupted conversion
        model = AutoModelForCausalLM.from_pretrained(
            ref.directory, config=config, dtype=torch.float32, **kwargs
        )
        tmp.mkdir(parents=True)
        # transformers will not `save_pretrained` a model its GGUF quantizer loaded: write the
        # config and the (float32) tensors ourselves; tied tensors are stored once
        config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        AutoTokenizer.from_pretrained(ref.directory, **kwargs).save_pretrained(tmp)
        try:
            GenerationConfig.from_pretrained(ref.directory, **kwargs).save_pretrained(tmp)
        except OSError:
            pass  # no generation config in the file: the model config's eos ids are used
        files = {}
        for path in sorted(tmp.iterdir()):
            path.chmod(0o644)  # safetensors writes 0600: a shared cache is read by others
            files[path.name] = path.stat().st_size
        (tmp / MANIFEST).write_text(json.dumps({"source": str(source), "files": files}))
        tmp.rename(root / key)
    except Exception as exc:  # noqa: BLE001  # whatever transformers raises: read the GGUF
        shutil.rmtree(tmp, ignore_errors=True)
        raise _NotConverted(f"{type(exc).__name__}: {exc}") from exc
    logger.info(
        "GGUF cache: converted %s to %s in %.1f s (later loads read it)",
        source,
        root / key,
        time.monotonic() - start,
    )


def _manifest(directory: Path) -> dict[str, Any] | None:
    """A converted directory's manifest, or None when it has none that reads."""
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _intact(directory: Path) -> bool:
    """`directory` holds every file its manifest lists, each of the listed size."""
    manifest = _manifest(directory)
    if manifest is None or not isinstance(manifest.get("files"), dict):
        return False
    try:
        return all((directory / n).stat().st_size == b for n, b in manifest["files"].items())
    except OSError:
        return False


def _drop_older(root: Path, key: str, source: str) -> None:
    """Remove the other converted directories of `source` (an earlier version of the file)."""
    for other in root.iterdir():
        if other.name == key or not other.is_dir() or other.suffix == ".tmp":
            continue
        manifest = _manifest(other)
        if manifest is not None and manifest.get("source") == source:
            shutil.rmtree(other, ignore_errors=True)
            (root / f"{other.name}.lock").unlink(missing_ok=True)
            logger.info("GGUF cache: removed %s (an earlier version of %s)", other, source)
