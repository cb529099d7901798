"""All-or-nothing writes of directories and files.

An export or a prepared corpus is written into a temporary sibling of its
target (same directory, hence same filesystem) and renamed into place only
once it is complete, so a crash or an exception midway never leaves a
half-written model where a server or a device would pick it up (or half a
corpus where a run would train from it), and never leaves the temporary
behind.
"""

import contextlib
import errno
import os
import shutil
import tempfile


def check_target(target, overwrite):
    """Raises `FileExistsError` naming `target` if it exists and not `overwrite`."""
    target = os.path.abspath(os.fspath(target))
    if os.path.lexists(target) and not overwrite:
        raise FileExistsError(
            errno.EEXIST,
            f"Target already exists: {target!r}; pass overwrite=True "
            "(--overwrite on the command line) to replace it",
            target,
        )


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def _swap_into_place(staged, target):
    """Renames `staged` to `target`, replacing whatever `target` is.

    A directory cannot be renamed over a non-empty directory, so an existing
    target is first renamed aside, and put back if the second rename fails.
    """
    if not os.path.lexists(target):
        os.rename(staged, target)
        return
    parent, name = os.path.split(target)
    aside = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
    old = os.path.join(aside, name)
    os.rename(target, old)
    try:
        os.rename(staged, target)
    except BaseException:
        os.rename(old, target)
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def atomic_directory(target, overwrite=False):
    """Yields a temporary directory that becomes `target` on success.

    Args:
        target: Final directory path.
        overwrite: Replace an existing `target`; otherwise it is an error.

    Yields:
        The path of an empty directory beside `target` to write into.

    Raises:
        FileExistsError: If `target` exists and `overwrite` is False (raised
            before anything is written).
    """
    target = os.path.abspath(os.fspath(target))
    check_target(target, overwrite)
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    staged = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
    try:
        # mkdtemp makes it 0700, which would hide the model from a server user.
        os.chmod(staged, 0o755)
        yield staged
        check_target(target, overwrite)  # Something may have appeared meanwhile.
        _swap_into_place(staged, target)
    except BaseException:
        _remove(staged)
        raise


def atomic_write_bytes(target, data, overwrite=False):
    """Writes `data` to the file `target` atomically (temp file, then rename).

    Args:
        target: Final file path.
        data: The bytes to write.
        overwrite: Replace an existing `target`; otherwise it is an error.

    Returns:
        The absolute path written.

    Raises:
        FileExistsError: If `target` exists and `overwrite` is False.
    """
    target = os.path.abspath(os.fspath(target))
    check_target(target, overwrite)
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    descriptor, staged = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=parent)
    try:
        os.chmod(staged, 0o644)  # mkstemp creates 0600.
        with os.fdopen(descriptor, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        check_target(target, overwrite)
        if os.path.isdir(target) and not os.path.islink(target):
            _swap_into_place(staged, target)
        else:
            os.replace(staged, target)
    except BaseException:
        _remove(staged)
        raise
    return target
