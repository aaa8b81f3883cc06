"""The cache helpers (cache.py): an entry is a header line then the compact sorted payload,
written beside its target under a hidden name and moved into place; one that cannot be put in place
leaves nothing behind and raises nothing (the cache is an optimisation); a header that is not ours
reads as missing; the digest is SHA-256 over length-prefixed parts."""

from pathlib import Path

import pytest

from pytest_gpuprops import cache


def test_an_entry_that_cannot_be_put_in_place_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "entry.json"
    target.mkdir()  # os.replace of a file onto a non-empty folder fails
    (target / "keep").write_text("x")
    cache.atomic_write(target, b"payload")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.json"]
    assert (target / "keep").read_text() == "x"


def test_a_write_into_a_file_posing_as_a_folder_is_ignored(tmp_path):
    (tmp_path / "blocker").write_text("not a folder")
    cache.atomic_write(tmp_path / "blocker" / "entry.json", b"payload")  # mkdir fails: OSError, swallowed
    assert (tmp_path / "blocker").read_text() == "not a folder"


def test_a_json_entry_is_a_header_line_then_the_compact_sorted_payload(tmp_path):
    import hashlib
    import json
    path = tmp_path / "e.json"
    cache.write_json(path, {"b": [1, 2], "a": "x"})
    body = b'{"a":"x","b":[1,2]}'  # sorted keys, no spaces: the same payload always stores the same bytes
    header = {"format": cache.FORMAT, "sha256": hashlib.sha256(body).hexdigest()}
    assert path.read_bytes() == json.dumps(header).encode() + b"\n" + body
    assert cache.read_json(path) == {"a": "x", "b": [1, 2]}


def test_an_entry_is_written_beside_its_target_under_a_hidden_name(tmp_path, monkeypatch):
    moves = []
    real = cache.os.replace
    monkeypatch.setattr(cache.os, "replace", lambda src, dst: moves.append((Path(src), Path(dst))) or real(src, dst))
    cache.atomic_write(tmp_path / "sub" / "e.bin", b"x")
    (src, dst), = moves
    assert src.parent == dst.parent == tmp_path / "sub" and src.name.startswith(".tmp-")  # same folder: an atomic rename


def test_digest_is_sha256_over_length_prefixed_parts():
    import hashlib
    want = hashlib.sha256((2).to_bytes(8, "little") + b"ab" + (1).to_bytes(8, "little") + b"c").hexdigest()
    assert cache.digest("ab", b"c") == want
    assert cache.digest("a", "bc") != want


@pytest.mark.parametrize("content", [b'[1]\n{}', b'"text"\n{}', b'{"format": 999, "sha256": ""}\n{}'])
def test_a_header_that_is_not_ours_reads_as_missing(tmp_path, content):
    path = tmp_path / "e.json"
    path.write_bytes(content)
    assert cache.read_json(path) is None
