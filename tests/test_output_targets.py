"""`dump --output` and `export --output` write to what the user named: a symbolic link is
followed (and stays a link), a FIFO or a character device is written to, never replaced, and a
failed write is one error line, exit 1.

Every target is real: symlinks, a FIFO read by a thread, /dev/full (reached through a link in
the test's directory, and as a device node made there when the test may make one, so no
version of the code under test can replace the machine's own /dev/full), run through the
installed console script.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import pytest

import convstore
from tests.conftest import one_error_line
from tests.test_storage_faults import tmpfs  # noqa: F401 - the fixture, defined once there

CONVSTORE = Path(sys.executable).parent / "convstore"


def run(*args: str, stdout: int | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "CONVSTORE_DB"}
    return subprocess.run(
        [str(CONVSTORE), *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with convstore.open_store(path) as store:
        conv = store.new_conversation(title="out")
        store.append_message(conv, "user", [{"type": "text", "text": "hello out there"}])
    return path


def conversation(db: Path) -> UUID:
    with convstore.open_store(db) as store:
        [info] = store.conversations()
        return info.id


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if "partial" in p.name)


def stable(output: bytes) -> bytes:
    """Output with a dump header's creation time taken out (two dumps differ only there)."""
    return re.sub(rb'"created_at": "[^"]*"', b'"created_at": ""', output)


def commands(db: Path) -> list[list[str]]:
    return [["dump"], ["export", str(conversation(db)), "--format", "jsonl"]]


def test_a_symlink_is_followed_and_its_target_written_whole(db: Path, tmp_path: Path) -> None:
    """`--output LINK` writes the file the link points to (in another directory), keeping
    its permissions; the link stays a link, and the dump in it loads."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in commands(db):
        real = elsewhere / "out.jsonl"
        real.write_text("old\n")
        real.chmod(0o640)
        link = tmp_path / "link.jsonl"
        link.unlink(missing_ok=True)
        link.symlink_to(real)
        proc = run("--db", str(db), *command, "--output", str(link))
        assert proc.returncode == 0, proc.stderr
        assert link.is_symlink()
        assert link.readlink() == real
        assert stat.S_IMODE(real.stat().st_mode) == 0o640
        assert stable(real.read_bytes()) == stable(run("--db", str(db), *command).stdout)
        assert leftovers(tmp_path) == leftovers(elsewhere) == []
    copy = tmp_path / "copy.db"
    real.write_bytes(run("--db", str(db), "dump").stdout)
    loaded = run("--db", str(copy), "load", str(link))
    assert loaded.returncode == 0, loaded.stderr


def test_a_dangling_symlink_gets_its_target_made(db: Path, tmp_path: Path) -> None:
    """A link to a file that does not exist yet: the file is made where it points."""
    link, real = tmp_path / "link.jsonl", tmp_path / "new.jsonl"
    link.symlink_to(real)
    proc = run("--db", str(db), "dump", "--output", str(link))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink()
    assert real.read_bytes().startswith(b'{"format": "convstore-dump"')


def release(fifo: Path) -> None:
    """Open and close ``fifo`` for writing, so a reader still waiting in open() reads
    nothing and ends; with no reader left (it read to the end) there is nothing to release."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: no reader has the FIFO open
            raise


def _read_fifo(fifo: Path, into: list[bytes]) -> None:
    with fifo.open("rb") as reader:
        into.append(reader.read())


def test_a_fifo_is_written_to_not_replaced(db: Path, tmp_path: Path) -> None:
    """`--output FIFO` streams into the pipe, where a reader gets the whole output; the
    FIFO is still a FIFO afterwards."""
    for command in commands(db):
        fifo = tmp_path / "pipe"
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
        # A second name for the same FIFO, to release the reader if the command never opens it.
        spare = tmp_path / "pipe-spare"
        spare.unlink(missing_ok=True)
        os.link(fifo, spare)
        got: list[bytes] = []
        reader = threading.Thread(target=_read_fifo, args=(fifo, got))
        reader.start()
        proc = run("--db", str(db), *command, "--output", str(fifo))
        release(spare)
        reader.join()
        assert proc.returncode == 0, proc.stderr
        assert stat.S_ISFIFO(fifo.lstat().st_mode)
        assert [stable(g) for g in got] == [stable(run("--db", str(db), *command).stdout)]
        assert leftovers(tmp_path) == []


def _full_devices(tmp_path: Path) -> list[Path]:
    """/dev/full through a symlink here, and a device node of its own numbers made here (when
    this user may make one)."""
    link = tmp_path / "full-link"
    link.symlink_to("/dev/full")
    found = [link]
    node = tmp_path / "full-node"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, Path("/dev/full").stat().st_rdev)
    except OSError:
        pass
    else:
        found.append(node)
    return found


def test_a_full_device_is_written_to_and_its_error_is_one_line(db: Path, tmp_path: Path) -> None:
    """/dev/full takes no byte: exit 1, one line naming the output and ENOSPC's message; the
    device (and the link to it) is left as it was, and no partial file is left."""
    for device in _full_devices(tmp_path):
        kind = device.lstat().st_mode
        for command in commands(db):
            proc = run("--db", str(db), *command, "--output", str(device))
            one_error_line(
                proc.returncode,
                proc.stdout,
                proc.stderr,
                f"cannot write {device}: No space left on device",
                code=1,
            )
            assert device.lstat().st_mode == kind
        assert stat.S_ISCHR(device.stat().st_mode)
    assert stat.S_ISCHR(Path("/dev/full").stat().st_mode)
    assert leftovers(tmp_path) == []


def test_a_full_stdout_is_one_error_line(db: Path) -> None:
    """`dump` and `export` to a stdout that takes no byte: exit 1, one line naming stdout."""
    for command in commands(db):
        with Path("/dev/full").open("wb") as full:
            proc = run("--db", str(db), *command, stdout=full.fileno())
        failure = "cannot write stdout: No space left on device"
        one_error_line(proc.returncode, b"", proc.stderr, failure, code=1)


def test_a_socket_is_refused_before_anything_is_written(db: Path, tmp_path: Path) -> None:
    """A target that is neither a file, a FIFO nor a character device: exit 2, one line."""
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        proc = run("--db", str(db), "dump", "--output", str(path))
    one_error_line(proc.returncode, proc.stdout, proc.stderr, "neither a file")
    assert stat.S_ISSOCK(path.lstat().st_mode)


def test_a_full_disk_leaves_the_file_as_it_was(
    db: Path,
    tmpfs: Callable[[str], Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    """A regular file on a disk that fills up: exit 1, one line naming ENOSPC; the file
    keeps its old content and the temporary file beside it is removed."""
    with convstore.open_store(db) as store:
        [info] = store.conversations()
        store.append_message(info.id, "user", [{"type": "text", "text": "x" * 300_000}])
    disk = tmpfs("128k")
    out = disk / "out.jsonl"
    out.write_text("old\n")
    for command in commands(db):
        proc = run("--db", str(db), *command, "--output", str(out))
        failure = f"cannot write {out}: No space left on device"
        one_error_line(proc.returncode, proc.stdout, proc.stderr, failure, code=1)
        assert out.read_text() == "old\n"
        assert sorted(p.name for p in disk.iterdir()) == ["out.jsonl"]
