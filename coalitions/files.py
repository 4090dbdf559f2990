"""Opening files safely: the one reader gate and the one writer of every command.

Files given on the command line may be anything: a named pipe that blocks a
reader forever, ``/dev/zero`` that never ends, a directory, a symbolic link, a
disk that fills up half way through a write.  Every reader and writer of the
toolkit goes through the two functions below, so that each of these cases ends
in one :class:`~coalitions.errors.InputError` line naming the file (exit code 2
on the command line; see the bad-input contract in ``docs/cli.md``).

Reading (:func:`open_input`, :func:`read_bytes`)
    Only regular files are opened.  The path is examined with ``stat`` before it
    is opened (a FIFO is never opened, so it cannot block), opened with
    ``O_NONBLOCK`` and examined again with ``fstat`` (the path may have been
    swapped in between), and its size is compared with the caller's limit
    before a single byte is read.

Writing (:func:`write_file`, :func:`write_text`)
    The output goes to a fresh temporary file in the target's folder, is
    flushed to disk, and is renamed over the target only when complete: a full
    disk, an error or an interrupt (``KeyboardInterrupt``, or the ``SIGTERM``
    handler of the command line) removes the temporary file and leaves any old
    target untouched -- never a 0-byte or partial file.  Only a regular file is
    ever replaced; a directory, device, FIFO or socket at the target is
    refused, and so is a file this user may not write (``os.access``): a
    rename would replace a read-only file of someone else's in a shared folder.  A symbolic link is written *through*: the file it points to is
    replaced and the link stays.

Examples
--------
>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> write_text(os.path.join(d, "a.txt"), "hello\\n")
>>> read_bytes(os.path.join(d, "a.txt"), max_bytes=100)
b'hello\\n'
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import BinaryIO, NoReturn

from .errors import InputError

__all__ = ["open_input", "read_bytes", "write_file", "write_text", "file_kind", "check_output_path"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str | None:
    """``None`` for a regular file, else what the ``st_mode`` describes (``"a directory"``, ...)."""
    if stat.S_ISREG(mode):
        return None
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "not a regular file"


def _fail(path, msg: str) -> NoReturn:
    raise InputError(f"{os.fsdecode(path) if isinstance(path, bytes) else path}: {msg}")


def _human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def _check_stat(path, st: os.stat_result, max_bytes: int | None, what: str) -> None:
    kind = file_kind(st.st_mode)
    if kind is not None:
        _fail(path, f"is {kind}, not a regular file; only regular files are read")
    if max_bytes is not None and st.st_size > max_bytes:
        _fail(path, f"is {st.st_size:,} bytes, larger than the {_human(max_bytes)} limit of {what}")


def _os_reason(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return "no such file"
    if isinstance(e, NotADirectoryError):
        return "no such file (a folder on its path is not a folder)"
    if isinstance(e, PermissionError):
        return "cannot be read (permission denied)"
    return f"cannot be read ({e.strerror or e.__class__.__name__})"


@contextmanager
def open_input(path: str | os.PathLike, max_bytes: int | None = None, what: str = "this file") -> Iterator[BinaryIO]:
    """Open ``path`` for binary reading only if it is a regular file of at most ``max_bytes``.

    Parameters
    ----------
    path : str or path-like
    max_bytes : int, optional
        The format's size limit; a larger file is refused before it is read.
    what : str
        What the limit is for, in the message (``"a JSON game"``).

    Raises
    ------
    InputError
        Naming ``path``: missing, unreadable, not a regular file (directory,
        FIFO, device, socket) or too large.
    """
    p = os.fspath(path)
    if not p:
        raise InputError("empty file name")
    try:
        _check_stat(path, os.stat(p), max_bytes, what)  # before opening: a FIFO is never opened
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        _fail(path, _os_reason(e))
    try:
        _check_stat(path, os.fstat(fd), max_bytes, what)  # the path may have changed since stat
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def _read_all(f: BinaryIO, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes, in a buffer sized by the file, not by the limit.

    ``f.read(max_bytes + 1)`` would reserve the whole limit (1 GiB for a JSON
    file) before reading a 700-byte game; the file's size is read first and
    anything beyond it (a file growing, a size-less procfs file) in 1 MiB steps.
    """
    size = os.fstat(f.fileno()).st_size
    parts = [f.read(min(size, max_bytes) + 1)]
    total = len(parts[0])
    while parts[-1] and total > size and total <= max_bytes:
        parts.append(f.read(min(1 << 20, max_bytes + 1 - total)))
        total += len(parts[-1])
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_bytes(path: str | os.PathLike, max_bytes: int, what: str = "this file") -> bytes:
    """The whole content of a regular file of at most ``max_bytes`` (see :func:`open_input`)."""
    with open_input(path, max_bytes, what) as f:
        try:
            data = _read_all(f, max_bytes)
        except MemoryError:
            _fail(path, f"out of memory reading it (limit {_human(max_bytes)})")
        except OSError as e:
            _fail(path, _os_reason(e))
    if len(data) > max_bytes:  # it grew while being read
        _fail(path, f"is larger than the {_human(max_bytes)} limit of {what}")
    return data


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _target(path) -> tuple[str, os.stat_result | None]:
    """The file a write to ``path`` replaces (through symbolic links) and its ``lstat`` (None if absent)."""
    p = os.fspath(path)
    if not p:
        raise InputError("empty file name")
    target = os.path.realpath(p) if os.path.islink(p) else p
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return target, None
    except OSError as e:
        _fail(path, f"cannot write ({e.strerror})")
    kind = file_kind(st.st_mode)
    if kind is not None:
        where = "" if target == p else f" (the link points to {target})"
        _fail(path, f"is {kind}{where}; only a regular file is ever replaced")
    if not os.access(target, os.W_OK):  # renaming over it would succeed in a writable folder: ask first
        owner = "" if st.st_uid == os.geteuid() else ", owned by another user"
        _fail(path, f"cannot write (the file is read-only for this user{owner}); it is left as it is")
    return target, st


def check_output_path(path: str | os.PathLike) -> None:
    """Fail early (before a long computation) when :func:`write_file` would refuse ``path``."""
    target, _ = _target(path)
    folder = os.path.dirname(target) or "."
    if not os.path.isdir(folder):
        _fail(path, "cannot write (no such folder)")


def write_file(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(f)`` on a temporary file next to ``path``, then rename it over ``path``.

    Parameters
    ----------
    path : str or path-like
        The target; a symbolic link is written through (its target is replaced).
    write : callable
        Writes the content into the binary file object it is given.

    Raises
    ------
    InputError
        Naming ``path``: the target is not a regular file, or the write failed
        (no such folder, permission denied, disk full, ...).  The temporary
        file is removed on every error and interrupt; an existing target is
        left as it was.
    """
    target, st = _target(path)
    folder, name = os.path.split(target)
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=folder or ".")
    except OSError as e:
        _fail(path, f"cannot write ({e.strerror})")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            if os.fstat(f.fileno()).st_size < f.tell():  # a short write that nobody reported
                raise OSError(errno.EIO, "short write: the file is shorter than what was written")
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            _fail(path, f"cannot write ({e.strerror or e.__class__.__name__})")
        if isinstance(e, MemoryError):
            _fail(path, "out of memory while writing it")
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` as UTF-8 through :func:`write_file`."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as e:
        _fail(path, f"cannot write: character {text[e.start]!r} at offset {e.start} is not valid Unicode")
    write_file(path, lambda f: f.write(data))
