"""Opening files named by other files safely: regular files only, JSON with bounds, names kept
inside their directory. Every failure is a FileFormatError naming the file.

A model directory, an index or a checkpoint is untrusted input: a name like "../x" or "/dev/zero",
a FIFO (whose open() blocks forever), or a deeply nested JSON document must end in a clear error,
not a hang, a read without end, or a RecursionError.
"""
import json
import os
import stat

from ..errors import FileFormatError

# config.json, index and manifest files are kilobytes; these bounds only stop pathological inputs.
MAX_JSON_BYTES = 64 * 2**20


def open_regular(path, what="file"):
    """A binary file object for `path` if it is a regular file (following symlinks); a FIFO, device,
    socket or directory is refused without blocking."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise FileFormatError(f"{path}: cannot read {what}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
            raise FileFormatError(f"{path}: {what} must be a regular file, this is {kind}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_json(path, what="JSON file", max_bytes=MAX_JSON_BYTES):
    """The parsed contents of a JSON file of at most max_bytes."""
    path = os.fspath(path)
    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(min(size, max_bytes) + 1)  # read(n) allocates n bytes up front
    if len(raw) > max_bytes:
        raise FileFormatError(f"{path}: {what} is larger than {max_bytes} bytes")
    return parse_json(raw, path, what)


def parse_json(raw, where, what="JSON"):
    """json.loads with every failure (bad UTF-8, syntax, nesting too deep, huge integers) as a
    FileFormatError naming `where`."""
    try:
        return json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except UnicodeDecodeError as e:
        raise FileFormatError(f"{where}: {what} is not UTF-8: {e}") from None
    except RecursionError:
        raise FileFormatError(f"{where}: {what} is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, and int() limits on huge numbers
        raise FileFormatError(f"{where}: {what} is not valid JSON: {e}") from None


def member(directory, name, where, field):
    """directory/name for a file `name` that another file (`where`, at `field`) refers to; the name
    must be relative and stay inside the directory (no absolute path, no '..' component)."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise FileFormatError(f"{where}: {field}: expected a file name, got {name!r}")
    parts = name.replace("\\", "/").split("/")
    if os.path.isabs(name) or ".." in parts:
        raise FileFormatError(f"{where}: {field}: {name!r} points outside {directory}; only files inside it "
                              "are read")
    return os.path.join(directory, name)
