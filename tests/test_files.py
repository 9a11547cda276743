"""Files written whole or not at all (rolltape.files): a reader never sees half a file or
half a folder, a failed write leaves what was there, and nothing stays behind but the
finished file."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from rolltape.files import (
    atomic_file,
    atomic_folder,
    move_into_place,
    sha256_of,
    unmap_paths,
    write_bytes,
    write_folder,
    write_json,
    write_text,
)


def test_written_files_read_back_and_leave_no_temporary(tmp_path: Path) -> None:
    assert write_bytes(tmp_path / "a.bin", b"\x00\x01").read_bytes() == b"\x00\x01"
    assert write_text(tmp_path / "a.txt", "héllo\n").read_text() == "héllo\n"
    obj = {"x": [1, 2.5, None], "y": "z"}
    assert json.loads(write_json(tmp_path / "a.json", obj).read_text()) == obj
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "a.json", "a.txt"]


def test_json_refuses_nan_and_leaves_the_old_file(tmp_path: Path) -> None:
    path = write_json(tmp_path / "r.json", {"mean": 1.0})
    with pytest.raises(ValueError):
        write_json(path, {"mean": float("nan")})
    assert json.loads(path.read_text()) == {"mean": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_write_that_raises_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = write_text(tmp_path / "f.txt", "old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(path, "w") as f:
            f.write("half of the new")
            raise KeyboardInterrupt  # Ctrl-C mid-write: a BaseException
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_the_new_content_appears_only_when_the_block_ends(tmp_path: Path) -> None:
    path = write_text(tmp_path / "f.txt", "old")
    with atomic_file(path, "w") as f:
        f.write("new")
        f.flush()
        assert path.read_text() == "old"  # a reader meanwhile sees the whole old file
        [temporary] = [p for p in tmp_path.iterdir() if p.name != "f.txt"]
        assert temporary.name.startswith(".f.txt.") and temporary.name.endswith(".partial")
    assert path.read_text() == "new"


def test_a_written_file_has_the_mode_a_plain_open_gives(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")  # honours the umask; mkstemp alone would make 0o600
    path = write_bytes(tmp_path / "m.bin", b"x")
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


def test_a_folder_replaces_the_old_one_whole(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "frames", {"0.png": b"a", "1.png": b"b"})
    write_folder(folder, {"0.png": b"new"})
    assert sorted(p.name for p in folder.iterdir()) == ["0.png"]
    assert (folder / "0.png").read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["frames"]  # the old one renamed, removed


def test_a_folder_s_files_keep_their_bare_names(tmp_path: Path) -> None:
    write_folder(tmp_path / "out" / "frames", {"../../escape.png": b"x", "/abs.png": b"y"})
    assert sorted(p.name for p in (tmp_path / "out" / "frames").iterdir()) == ["abs.png",
                                                                                "escape.png"]
    assert not (tmp_path / "escape.png").exists()


def test_a_failed_folder_leaves_the_old_one_and_no_temporary(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "v", {"a": b"1"})
    with pytest.raises(RuntimeError):
        with atomic_folder(folder) as tmp:
            (tmp / "b").write_bytes(b"2")
            raise RuntimeError("the encoder died")
    assert [p.name for p in folder.iterdir()] == ["a"]
    assert [p.name for p in tmp_path.iterdir()] == ["v"]


def test_move_into_place_replaces_a_file_or_a_link_by_a_folder(tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.write_text("a file")
    built = tmp_path / "built"
    built.mkdir()
    (built / "x").write_text("1")
    move_into_place(built, target)
    assert target.is_dir() and (target / "x").read_text() == "1" and not built.exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("kept")
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    built.mkdir()
    move_into_place(built, link)  # the link goes, never what it points to
    assert not link.is_symlink() and link.is_dir() and (elsewhere / "keep").exists()


def test_sha256_equals_hashlib_s_over_more_than_one_chunk(tmp_path: Path) -> None:
    data = os.urandom((1 << 20) + 17)  # the reader goes by 1 MiB chunks
    path = write_bytes(tmp_path / "big", data)
    assert sha256_of(path) == hashlib.sha256(data).hexdigest()
    assert sha256_of(write_bytes(tmp_path / "empty", b"")) == hashlib.sha256(b"").hexdigest()


def test_unmap_paths_names_every_mapped_path_and_leaves_the_rest() -> None:
    text = "cannot read /tmp/t1/a.npz nor /tmp/t1/b.npz; /tmp/other stays"
    mapped = unmap_paths(text, {"/tmp/t1/a.npz": "runs/x/a.npz", "/tmp/t1/b.npz": "b.npz"})
    assert mapped == "cannot read runs/x/a.npz nor b.npz; /tmp/other stays"
    assert unmap_paths(text, {}) == text


def test_write_texts_is_all_or_none(tmp_path):
    import pytest

    from rolltape.files import write_texts

    first = tmp_path / "a.json"
    with pytest.raises(OSError):
        write_texts({first: "{}", tmp_path / "missing" / "a.html": "<p>"})
    assert not first.exists()  # written, then removed with the failed other half
    write_texts({first: "{}", tmp_path / "a.html": "<p>"})
    assert first.read_text() == "{}" and (tmp_path / "a.html").read_text() == "<p>"
