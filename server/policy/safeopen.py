"""Open what was judged, and nothing else: no symlink at any component, never block on a FIFO.

The path policy judges a *real* path (symlinks resolved). Between that check and the open a
component could be swapped for a symlink (to ``~/.ssh``), or the file for a FIFO (whose open
blocks until a writer appears). So every open here:

- follows **no symlink at any component** — Linux: ``openat2(RESOLVE_NO_SYMLINKS)`` (one
  syscall, via ctypes); macOS: ``O_NOFOLLOW_ANY``; other POSIX: one ``O_NOFOLLOW`` open per
  component with ``dir_fd``; Windows (no ``dir_fd``): open, then verify that the path still has
  no link and names the very file that was opened;
- uses ``O_NONBLOCK`` (a FIFO opens at once instead of hanging) and refuses anything that is not
  a regular file for reading;
- writes through a directory descriptor opened the same way: the temporary file is created
  ``O_EXCL | O_NOFOLLOW`` in it and renamed onto the name in it, so a dangling or swapped
  symlink can never redirect the write.

A symlink met on the way is :class:`PathChanged` (``ELOOP``): the real path had none when it was
judged, so one appearing means the path was swapped after the check.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
import sys

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_NOCTTY = getattr(os, "O_NOCTTY", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
O_BINARY = getattr(os, "O_BINARY", 0)
# macOS 11+: fail with ELOOP if any component is a symlink (Python may not export the name).
O_NOFOLLOW_ANY = getattr(os, "O_NOFOLLOW_ANY", 0x20000000 if sys.platform == "darwin" else 0)

READ_FLAGS = os.O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_BINARY
DIR_FLAGS = os.O_RDONLY | O_DIRECTORY | O_CLOEXEC

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
AT_FDCWD = -100
SYS_OPENAT2 = 437  # the same number on every architecture that has it (new-style syscall)


class PathChanged(OSError):
    """A symlink appeared on a path that had none when it was judged, or the file changed."""


class NotRegular(OSError):
    """Reading is refused: a directory, FIFO, socket or device (FIFOs would block)."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.EINVAL, what)
        self.what = what


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2():  # -> callable | None
    """``openat2`` through libc's ``syscall()``, if this kernel has it and seccomp allows it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    fn.argtypes = [
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.POINTER(_OpenHow),
        ctypes.c_size_t,
    ]
    how = _OpenHow(DIR_FLAGS, 0, RESOLVE_NO_SYMLINKS)
    fd = fn(SYS_OPENAT2, AT_FDCWD, b"/", ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        return None  # ENOSYS (kernel < 5.6) or EPERM (a seccomp filter): use the fallback
    os.close(fd)
    return fn


_openat2 = _load_openat2()
HAS_OPENAT2 = _openat2 is not None  # Linux >= 5.6 without a seccomp filter refusing it
_HOW_SIZE = ctypes.sizeof(_OpenHow)
_POSIX_WALK = os.open in os.supports_dir_fd
O_PATH = getattr(os, "O_PATH", 0)
# A handle on the path itself (nothing is opened for reading: no FIFO blocks, no device
# acts), refused with ELOOP at the first symlink of any component.
_NO_LINK_PATH = _OpenHow(O_PATH | O_CLOEXEC, 0, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
_NO_LINK_PATH_REF = ctypes.byref(_NO_LINK_PATH)


def symlink_free(path: str) -> bool:
    """True when the absolute, normalised ``path`` names an existing file through no symlink
    at any component, so ``os.path.realpath(path) == path``; False when that is not so or
    cannot be told here (no ``openat2``, a path that is not in normal form, any error).

    Why: ``realpath`` is one ``lstat`` per component and Python between them (~15 µs for a
    file four folders deep, on every call that names a path); one ``openat2`` of an
    ``O_PATH`` handle answers the common case at the kernel's cost. A False sends the caller
    to ``realpath`` as before, so the answer is the same either way.
    """
    if (
        _openat2 is None
        or not O_PATH
        or not path.startswith("/")
        or "\0" in path  # a C string would end at it: realpath refuses it instead
        or "//" in path
        or "/./" in path
        or "/../" in path
        or path.endswith(("/", "/.", "/.."))
    ):
        return False
    try:
        raw = os.fsencode(path)
    except UnicodeError:
        return False
    fd = _openat2(SYS_OPENAT2, AT_FDCWD, raw, _NO_LINK_PATH_REF, _HOW_SIZE)
    if fd < 0:
        return False
    os.close(fd)
    return True


def _fail(err: int, path: str) -> OSError:
    if err == errno.ELOOP:
        return PathChanged(errno.ELOOP, "a symbolic link appeared in the path", path)
    return OSError(err, os.strerror(err), path)


def open_nofollow(path: str, flags: int, mode: int = 0o600) -> int:
    """``os.open`` of an absolute path that follows no symlink at any component."""
    if _openat2 is not None:
        mode = mode if flags & os.O_CREAT else 0  # openat2 refuses a mode without O_CREAT
        how = _OpenHow(flags | O_NOFOLLOW, mode, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
        fd = _openat2(SYS_OPENAT2, AT_FDCWD, os.fsencode(path), ctypes.byref(how), _HOW_SIZE)
        if fd < 0:
            err = ctypes.get_errno()
            if err == errno.EAGAIN:  # openat2 may ask to retry when a rename raced the lookup
                raise PathChanged(errno.EAGAIN, "the path changed while being opened", path)
            raise _fail(err, path)
        return fd
    if O_NOFOLLOW_ANY:
        try:
            fd = os.open(path, flags | O_NOFOLLOW | O_NOFOLLOW_ANY, mode)
        except OSError as e:
            raise _fail(e.errno or errno.EIO, path) from None
        _verify_getpath(fd, path)  # a macOS that ignores the flag must not pass silently
        return fd
    if _POSIX_WALK:
        return _walk_open(path, flags, mode)
    return _open_verify(path, flags, mode)


def _verify_getpath(fd: int, path: str) -> None:
    """macOS: the descriptor's own path (``F_GETPATH``) must be the path that was judged."""
    if sys.platform != "darwin":  # only macOS has F_GETPATH
        return
    try:
        import fcntl

        got = fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024)).split(b"\0", 1)[0]
    except (ImportError, AttributeError, OSError):
        return
    if os.fsdecode(got).casefold() != path.casefold():
        os.close(fd)
        raise _fail(errno.ELOOP, path)


def _walk_open(path: str, flags: int, mode: int) -> int:
    parts = [p for p in path.split(os.sep) if p]
    try:
        fd = os.open(os.sep, DIR_FLAGS)
    except OSError as e:
        raise _fail(e.errno or errno.EIO, path) from None
    try:
        if not parts:
            return os.dup(fd)
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                if last:
                    return os.open(part, flags | O_NOFOLLOW, mode, dir_fd=fd)
                nxt = os.open(part, DIR_FLAGS | O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                err = e.errno or errno.EIO
                if err in (errno.ENOTDIR, errno.ELOOP, errno.EMLINK):
                    with contextlib.suppress(OSError):
                        if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                            err = errno.ELOOP
                raise _fail(err, path) from None
            os.close(fd)
            fd = nxt
        raise AssertionError("unreachable")
    finally:
        os.close(fd)


def _open_verify(path: str, flags: int, mode: int) -> int:
    """No ``dir_fd`` (Windows): open, then check that the path still has no link and still
    names the file that was opened. A narrower window than check-then-open, not none."""
    try:
        fd = os.open(path, flags & ~O_DIRECTORY, mode)
    except OSError as e:
        raise _fail(e.errno or errno.EIO, path) from None
    try:
        if os.path.normcase(os.path.realpath(path)) != os.path.normcase(path):
            raise _fail(errno.ELOOP, path)
        a, b = os.fstat(fd), os.stat(path)
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
            raise PathChanged(errno.ESTALE, "the file changed while being opened", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_read(path: str) -> tuple[int, os.stat_result]:
    """A descriptor for reading the regular file at the absolute real ``path``, and its stat.

    Never blocks (``O_NONBLOCK``); a FIFO, socket, device or directory is refused with
    :class:`NotRegular` after a non-blocking open (or before it: sockets cannot be opened).
    """
    fd = open_nofollow(path, READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(_kind(st.st_mode))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    return "not a regular file"


def open_dir(path: str, *, create: bool = False) -> int:
    """A descriptor for the directory at the absolute real ``path``, no symlink followed;
    with ``create``, missing directories are made one by one inside their opened parent."""
    try:
        return open_nofollow(path, DIR_FLAGS)
    except FileNotFoundError:
        if not create:
            raise
    missing: list[str] = []
    base = path
    while True:
        base, name = os.path.split(base)
        if not name:
            raise FileNotFoundError(errno.ENOENT, "no existing parent", path)
        missing.insert(0, name)
        try:
            fd = open_nofollow(base, DIR_FLAGS)
            break
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
    try:
        for name in missing:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=fd)
            try:
                nxt = os.open(name, DIR_FLAGS | O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                raise _fail(e.errno or errno.EIO, os.path.join(base, name)) from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _umask() -> int:
    """The process umask without changing it (``os.umask`` would race other threads)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    # No /proc: read it by setting it; meanwhile other threads create files more privately.
    current = os.umask(0o077)
    os.umask(current)
    return current


def replace_in(dir_fd: int, name: str, data: bytes, path: str) -> bool:
    """Atomically make ``name`` in the directory ``dir_fd`` hold ``data``.

    The temporary file is created ``O_EXCL | O_NOFOLLOW`` (0600 until it is complete), fsynced,
    given the old file's mode (or the umask's), and renamed over ``name``; ``rename`` replaces
    a directory entry and never writes through a link. An existing ``name`` that is now a
    symlink (it was none when judged) is :class:`PathChanged`. True when ``name`` existed.
    """
    if sys.platform == "win32":  # no dir_fd there: callers check WRITE_AT_SUPPORTED first
        raise NotImplementedError("dir_fd unavailable on this platform")
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
        existed = False
    else:
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if stat.S_ISLNK(st.st_mode):
            raise _fail(errno.ELOOP, path)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(_kind(st.st_mode))
        mode = stat.S_IMODE(st.st_mode)
        existed = True
    tmp = f".a2a-{secrets.token_hex(6)}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_BINARY,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return existed


# ``os.replace`` takes ``src_dir_fd``/``dst_dir_fd`` wherever ``os.rename`` does (both are
# ``renameat``), but only ``rename`` is listed in ``os.supports_dir_fd``: testing ``replace``
# there was always False, and every write took the path-based fallback meant for Windows.
WRITE_AT_SUPPORTED = _POSIX_WALK and os.rename in os.supports_dir_fd
