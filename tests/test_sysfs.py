"""Sysfs reads through held descriptors (gpuwatch/sysfs.py): a file read again is read with pread at offset 0
on the descriptor of its first reads; what a fake tree does to its files (rewrite in place, replace, unlink,
remove a card's directory) is seen as a fresh open would see it; each thread holds its own descriptors and
closes them when it ends or after forget(); beyond the caps a read opens and closes as before."""

from __future__ import annotations

import errno
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuwatch import sysfs as sysfs_module
from gpuwatch.sysfs import Sysfs, SysfsError

ATTR = "devices/card0/temp1_input"


def _open_fds(path: Path) -> int:
    """How many of this process's descriptors are open on ``path``'s tree (/proc/self/fd's links)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(path))
        except FileNotFoundError:  # the descriptor listdir itself used
            pass
    return count


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "devices/card0").mkdir(parents=True)
    (tmp_path / ATTR).write_text("40000\n")
    return tmp_path


def _rewritten_in_place(tree: Path) -> None:
    (tree / ATTR).write_text("41000\n")  # open(O_TRUNC) and write: the same inode, as the simulator does


def _replaced(tree: Path) -> None:
    (tree / "new").write_text("41000\n")
    os.replace(tree / "new", tree / ATTR)


def _unlinked(tree: Path) -> None:
    (tree / ATTR).unlink()


def _card_gone(tree: Path) -> None:
    shutil.rmtree(tree / "devices/card0")


def _card_back(tree: Path) -> None:
    shutil.rmtree(tree / "devices/card0")
    (tree / "devices/card0").mkdir()
    (tree / ATTR).write_text("41000\n")


@pytest.mark.parametrize(("change", "expected"), [
    (_rewritten_in_place, "41000"),
    (_replaced, "41000"),
    (_unlinked, None),
    (_card_gone, None),
    (_card_back, "41000"),
])
def test_a_held_file_reads_what_a_fresh_open_would(tree: Path, change: Callable[[Path], None],
                                                   expected: str | None) -> None:
    sysfs = Sysfs(tree)
    assert sysfs.read(ATTR) == sysfs.read(ATTR) == "40000"  # the second read keeps the descriptor
    assert _open_fds(tree) == 1
    change(tree)
    assert sysfs.read(ATTR) == expected
    assert sysfs.read(ATTR) == expected
    assert Sysfs(tree).read(ATTR) == expected
    sysfs.close()
    assert _open_fds(tree) == 0


def test_a_file_read_once_is_not_held_and_a_file_read_again_is(tree: Path) -> None:
    """The fixed attributes are read once per discovery: they take no place."""
    sysfs = Sysfs(tree)
    sysfs.read(ATTR)
    assert _open_fds(tree) == 0
    sysfs.read(ATTR)
    assert _open_fds(tree) == 1
    for _ in range(5):
        sysfs.read(ATTR)
    assert _open_fds(tree) == 1
    sysfs.close()


def test_two_threads_reading_one_path_hold_a_descriptor_each(tree: Path) -> None:
    sysfs = Sysfs(tree)
    values: list[str | None] = []
    both_read, done = threading.Barrier(3), threading.Event()

    def reader() -> None:
        for _ in range(50):
            values.append(sysfs.read(ATTR))
        both_read.wait(timeout=60)
        done.wait(timeout=60)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    both_read.wait(timeout=60)
    try:
        assert values == ["40000"] * 100
        assert _open_fds(tree) == 2
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=60)
    assert _open_fds(tree) == 0  # each thread's descriptors closed as it ended


def test_a_thread_that_ends_closes_its_descriptors(tree: Path) -> None:
    sysfs = Sysfs(tree)
    thread = threading.Thread(target=lambda: [sysfs.read(ATTR) for _ in range(3)])
    thread.start()
    thread.join(timeout=60)
    assert _open_fds(tree) == 0
    assert sysfs.read(ATTR) == sysfs.read(ATTR) == "40000"  # this thread's own, held afresh
    assert _open_fds(tree) == 1
    sysfs.close()


def test_forget_makes_each_thread_let_its_descriptors_go_at_its_next_read(tree: Path) -> None:
    (tree / "devices/card0/other").write_text("1\n")
    sysfs = Sysfs(tree)
    for _ in range(2):
        sysfs.read(ATTR), sysfs.read("devices/card0/other")
    assert _open_fds(tree) == 2
    sysfs.forget()
    assert _open_fds(tree) == 2  # nothing closed under a reader: each thread closes its own
    assert sysfs.read(ATTR) == "40000"
    assert _open_fds(tree) == 0  # read once in the new generation: held again from its next read
    sysfs.read(ATTR)
    assert _open_fds(tree) == 1
    sysfs.close()


def test_after_close_nothing_is_held_and_reads_go_on(tree: Path) -> None:
    sysfs = Sysfs(tree)
    sysfs.read(ATTR), sysfs.read(ATTR)
    sysfs.close()
    assert _open_fds(tree) == 0
    for _ in range(3):
        assert sysfs.read(ATTR) == "40000"
    assert _open_fds(tree) == 0


def _files(tree: Path, count: int) -> list[str]:
    names = [f"devices/card0/f{index}" for index in range(count)]
    for index, name in enumerate(names):
        (tree / name).write_text(f"{index}\n")
    return names


def test_beyond_a_threads_cap_reads_open_and_close(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysfs_module, "HELD_PER_THREAD", 2)
    names = _files(tree, 4)
    sysfs = Sysfs(tree)
    for _ in range(3):
        assert [sysfs.read(name) for name in names] == ["0", "1", "2", "3"]
    assert _open_fds(tree) == 2
    sysfs.close()


def test_beyond_the_process_cap_reads_open_and_close(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    earlier = Sysfs(tree)  # holds a place of the process's own list, as an earlier test's reader may
    earlier.read(ATTR), earlier.read(ATTR)
    monkeypatch.setattr(sysfs_module, "_free", [0])  # one place left in the process
    names = _files(tree, 3)
    sysfs, other = Sysfs(tree), Sysfs(tree)
    earlier.close()  # its place goes back to the list it came from, not to this one
    for _ in range(3):
        assert [sysfs.read(name) for name in names] == ["0", "1", "2"]
        assert [other.read(name) for name in names] == ["0", "1", "2"]
    assert _open_fds(tree) == 1
    sysfs.close()
    other.close()
    assert sysfs_module._free == [0]  # the place given back


def test_the_process_cap_is_well_under_the_services_descriptor_limit() -> None:
    unit = (Path(__file__).parents[1] / "systemd/gpuwatch.service").read_text()
    assert "LimitNOFILE=65536" in unit
    assert sysfs_module.HELD_PER_PROCESS <= 65536 // 16


def test_a_fifo_is_never_held(tree: Path) -> None:
    """A test's FIFO stands in for a driver call that never returns: opened each time, as before."""
    fifo = tree / "devices/card0/fifo"
    os.mkfifo(fifo)
    keep = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer, so the reader's open does not block
    sysfs = Sysfs(tree)
    try:
        for value in (b"1\n", b"2\n", b"3\n"):
            os.write(keep, value)
            assert sysfs.read_bytes("devices/card0/fifo") == value
        assert _open_fds(tree) == 1  # only the test's own
    finally:
        os.close(keep)
        sysfs.close()


# A driver's error on a held descriptor cannot be made here (tmpfs reads do not fail): os.pread stands in.

def _failing_pread(code: int, times: int) -> Callable[[int, int, int], bytes]:
    real, failures = os.pread, [code] * times

    def pread(fd: int, size: int, offset: int) -> bytes:
        if failures:
            raise OSError(failures.pop(), os.strerror(code))
        return real(fd, size, offset)

    return pread


@pytest.mark.parametrize("code", [errno.ENODEV, errno.ENOENT, errno.ESTALE])
def test_a_removed_node_is_opened_afresh_once(tree: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """kernfs answers ENODEV on a descriptor whose node was removed: the path is opened again."""
    sysfs = Sysfs(tree)
    sysfs.read(ATTR), sysfs.read(ATTR)
    monkeypatch.setattr(os, "pread", _failing_pread(code, 1))
    assert sysfs.read(ATTR) == "40000"
    assert _open_fds(tree) == 1  # the failed descriptor closed, the fresh one held
    os.link(tree / ATTR, tree / "elsewhere")  # the inode stays linked, as a removed kernfs node does
    (tree / ATTR).unlink()
    monkeypatch.setattr(os, "pread", _failing_pread(code, 1))
    assert sysfs.read(ATTR) is None  # gone at its path: absent, as a fresh open says
    sysfs.close()


@pytest.mark.parametrize("code", [errno.EIO, errno.EPERM, errno.EOPNOTSUPP])
def test_another_error_raises_and_drops_the_descriptor(tree: Path, monkeypatch: pytest.MonkeyPatch,
                                                       code: int) -> None:
    sysfs = Sysfs(tree)
    sysfs.read(ATTR), sysfs.read(ATTR)
    monkeypatch.setattr(os, "pread", _failing_pread(code, 1))
    with pytest.raises(SysfsError) as raised:
        sysfs.read(ATTR)
    assert raised.value.reason == errno.errorcode[code]
    assert _open_fds(tree) == 0
    assert sysfs.read(ATTR) == "40000"
    sysfs.close()


def test_a_real_sysfs_attribute_read_again_at_offset_zero() -> None:
    """On the machine's own sysfs a held descriptor read at offset 0 shows the attribute afresh."""
    sysfs = Sysfs("/sys")
    name = next((f"class/net/{dev}/statistics/rx_bytes" for dev in sorted(os.listdir("/sys/class/net"))
                 if os.path.exists(f"/sys/class/net/{dev}/statistics/rx_bytes")), None)
    if name is None:
        pytest.skip("no network device in /sys")
    values = [sysfs.read(name) for _ in range(3)]
    assert all(value is not None and value.isdigit() for value in values)
    assert _open_fds(Path("/sys")) >= 1
    sysfs.close()


def test_a_held_file_of_a_fake_tree_keeps_the_unlinked_check_and_one_on_sysfs_skips_it(tree: Path) -> None:
    """sysfs never unlinks a live attribute: a descriptor held there is read without the fstat a fake tree's
    (tmpfs: its files are replaced and unlinked) needs before each read. The decision is fstatfs(2)'s f_type."""
    fake = Sysfs(tree)
    fake.read(ATTR), fake.read(ATTR)
    held = fake._local.held
    assert list(held.fds) == [ATTR] and not held.sysfs_fds
    fake.close()
    name = "class/net/lo/statistics/rx_bytes"
    if not os.path.exists(f"/sys/{name}"):
        pytest.skip("no /sys/class/net/lo")
    real = Sysfs("/sys")
    real.read(name), real.read(name)
    held = real._local.held
    assert list(held.sysfs_fds) == [name] and not held.fds
    assert real.read(name) is not None
    real.close()
    assert not held.sysfs_fds


def test_on_sysfs_says_no_on_any_doubt(monkeypatch: pytest.MonkeyPatch) -> None:
    """No libc fstatfs, or an error from it: not sysfs, so the check stays (never wrong, only slower)."""
    assert not sysfs_module.on_sysfs(-1)  # EBADF
    if not os.path.isdir("/sys/class"):
        pytest.skip("no /sys")
    fd = os.open("/sys/class", os.O_RDONLY | os.O_CLOEXEC)
    try:
        assert sysfs_module.on_sysfs(fd)
        monkeypatch.setattr(sysfs_module, "_fstatfs", None)
        assert not sysfs_module.on_sysfs(fd)
    finally:
        os.close(fd)
