"""The on-disk plan store (plans/store.py): entries round-trip, and a damaged,
foreign or half-written entry is never trusted. Plans are fake bytes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from plan_fakes import conv_relu_ir, flip_last_byte, key_of

from torch_graphfuse.backends.cudnn.plans.key import PlanKey
from torch_graphfuse.backends.cudnn.plans.store import (
    CACHE_DIR_ENV,
    FORMAT_VERSION,
    CorruptEntry,
    PlanStore,
    cache_dir,
    decode_entry,
)


def test_entry_round_trips_payload_and_meta(store: PlanStore) -> None:
    key = key_of(conv_relu_ir())
    payload = bytes(range(256)) * 3
    assert store.save(key, payload, {"uids": [[0, 7], [3, 9]], "autotuned": True})
    stored = store.load(key)
    assert stored is not None
    assert stored.payload == payload
    assert stored.meta == {"uids": [[0, 7], [3, 9]], "autotuned": True}


def test_missing_entry_loads_as_none(store: PlanStore) -> None:
    assert store.load(key_of(conv_relu_ir())) is None


def _saved(store: PlanStore, key: PlanKey) -> bytes:
    store.save(key, b"cudnn plan bytes" * 10, {"uids": [], "autotuned": False})
    return store.path(key).read_bytes()


def _other_format(data: bytes) -> bytes:
    return data.replace(f'"format": {FORMAT_VERSION}'.encode(), b'"format": 0')


@pytest.mark.parametrize(("damage", "reason"), [
    (flip_last_byte, "checksum"),
    (lambda data: data[:-5], "bytes, the header says"),
    (lambda data: data[:20], "truncated header"),
    (lambda data: b"", "not a torch_graphfuse plan entry"),
    (lambda data: b"XXXXXXXX" + data[8:], "not a torch_graphfuse plan entry"),
    (_other_format, "entry format 0"),
])
def test_damaged_entry_is_not_trusted(store: PlanStore, damage: Any, reason: str) -> None:
    key = key_of(conv_relu_ir())
    damaged = damage(_saved(store, key))
    with pytest.raises(CorruptEntry, match=reason):
        decode_entry(damaged, key)
    store.path(key).write_bytes(damaged)
    assert store.load(key) is None


def test_entry_of_another_key_is_not_trusted(store: PlanStore) -> None:
    """A file copied or renamed from another key's entry (another GPU, another cuDNN)."""
    graph = conv_relu_ir()
    ours, theirs = key_of(graph), key_of(graph, cudnn_version=91000)
    store.path(ours).parent.mkdir(parents=True)
    store.path(ours).write_bytes(_saved(store, theirs))
    with pytest.raises(CorruptEntry, match="another key"):
        decode_entry(store.path(ours).read_bytes(), ours)
    assert store.load(ours) is None
    assert store.load(theirs) is not None


def test_failed_write_keeps_the_old_entry_and_leaves_no_temporary_file(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    key = key_of(conv_relu_ir())
    store.save(key, b"old plan", {"uids": [], "autotuned": False})

    def no_rename(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", no_rename)
    assert not store.save(key, b"new plan", {"uids": [], "autotuned": False})
    monkeypatch.undo()
    stored = store.load(key)
    assert stored is not None and stored.payload == b"old plan"
    assert sorted(p.name for p in store.directory.iterdir()) == [store.path(key).name]


def test_unwritable_cache_folder_is_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    store = PlanStore(blocker / "plans")
    assert not store.save(key_of(conv_relu_ir()), b"plan", {"uids": [], "autotuned": False})
    assert store.load(key_of(conv_relu_ir())) is None


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "torch_graphfuse" / "cudnn"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "torch_graphfuse" / "cudnn"
