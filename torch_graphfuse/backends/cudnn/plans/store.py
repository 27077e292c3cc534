"""Serialized plans on disk, one file per PlanKey.

Plans are kept as cuDNN serialized them, under TORCH_GRAPHFUSE_CACHE_DIR (default
~/.cache/torch_graphfuse/cudnn), so a second process starts without choosing
again. An entry carries its key, a format version and a checksum of the plan
bytes; anything that does not match (a corrupt, truncated, foreign or older
entry) is rebuilt and overwritten, never handed to cuDNN. Entries are written to
a temporary file and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .... import config, log
from .key import PlanKey

# One log name for the package's modules.
NAME = log.module_name(str(Path(__file__).parent))

FORMAT_VERSION = 2
MAGIC = b"TGFPLAN\0"
_HEADER_LEN = struct.Struct("<I")
CACHE_DIR_ENV = config.CACHE_DIR.env


def cache_dir() -> Path:
    """Where plans are kept on disk: $TORCH_GRAPHFUSE_CACHE_DIR, else the user's
    cache folder ($XDG_CACHE_HOME or ~/.cache) / torch_graphfuse / cudnn."""
    chosen = config.value(config.CACHE_DIR)
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "torch_graphfuse" / "cudnn"


class CorruptEntry(ValueError):
    """A stored plan that must not be trusted; the message says why."""


@dataclass(frozen=True)
class StoredPlan:
    payload: bytes  # the plan as cuDNN serialized it
    meta: dict[str, Any]  # what running it needs besides the bytes (see Compiled.meta)


def encode_entry(key: PlanKey, payload: bytes, meta: dict[str, Any]) -> bytes:
    """MAGIC | header length (u32 LE) | header (JSON) | payload."""
    header = json.dumps({"format": FORMAT_VERSION, "key": key.to_dict(), "meta": meta,
                         "payload_size": len(payload),
                         "payload_sha256": hashlib.sha256(payload).hexdigest()},
                        sort_keys=True).encode()
    return MAGIC + _HEADER_LEN.pack(len(header)) + header + payload


def decode_entry(data: bytes, key: PlanKey) -> StoredPlan:
    """The plan stored in `data` for `key`; CorruptEntry unless every check passes."""
    start = len(MAGIC) + _HEADER_LEN.size
    if len(data) < start or data[:len(MAGIC)] != MAGIC:
        raise CorruptEntry("not a torch_graphfuse plan entry")
    (header_len,) = _HEADER_LEN.unpack_from(data, len(MAGIC))
    if start + header_len > len(data):
        raise CorruptEntry("truncated header")
    try:
        header = json.loads(data[start:start + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptEntry(f"unreadable header: {error}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        found = header.get("format") if isinstance(header, dict) else None
        raise CorruptEntry(f"entry format {found!r}, this version reads {FORMAT_VERSION}")
    if header.get("key") != key.to_dict():
        raise CorruptEntry("entry is for another key")
    payload = data[start + header_len:]
    if header.get("payload_size") != len(payload):
        raise CorruptEntry(f"plan is {len(payload)} bytes, the header says "
                           f"{header.get('payload_size')}")
    if header.get("payload_sha256") != hashlib.sha256(payload).hexdigest():
        raise CorruptEntry("plan bytes do not match their checksum")
    meta = header.get("meta")
    if not isinstance(meta, dict):
        raise CorruptEntry("entry has no meta")
    return StoredPlan(payload, meta)


class PlanStore:
    """Serialized plans in a folder, one file per key."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, key: PlanKey) -> Path:
        return self.directory / f"{key.digest()}.plan"

    def load(self, key: PlanKey) -> StoredPlan | None:
        """The stored plan of `key`; None when there is none or it is not to be trusted."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            log.debug(NAME, f"cannot read {path}: {error}")
            return None
        try:
            return decode_entry(data, key)
        except CorruptEntry as error:
            log.debug(NAME, f"ignoring {path}: {error}")
            return None

    def save(self, key: PlanKey, payload: bytes, meta: dict[str, Any]) -> bool:
        """Write the entry atomically (temporary file, then rename); False when the
        folder is not writable: the cache is an optimization, never a requirement."""
        data = encode_entry(key, payload, meta)
        tmp: str | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".plan")
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, self.path(key))
            return True
        except OSError as error:
            log.debug(NAME, f"cannot write {self.path(key)}: {error}")
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return False
