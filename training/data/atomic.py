"""All-or-nothing writes of directories and files.

An export or a prepared corpus is written into a temporary sibling of its
target (same directory, hence same filesystem) and renamed into place only
once it is complete, so a crash or an exception midway never leaves a
half-written model where a server or a device would pick it up (or half a
corpus where a run would train from it), and never leaves the temporary
behind.  A file of a run is written the same way (`atomic_path`,
`atomic_write_text`, `atomic_write_json`).

Whole means on disk, not only in the page cache: every file is fsynced
before the rename, and the folder after it, so a power cut leaves the old
content or the new, never a new name on empty blocks.  A temporary is named
`.NAME.tmp-XXXX`, so what a kill leaves behind says which file it was
(`training.runs.run_dir` knows them as a run's own).

`overwrite` replaces only what the caller recognises as its own kind of
output (`replaceable`): an export replaces an export, never a folder of
someone's files.
"""

import contextlib
import errno
import json
import os
import shutil
import tempfile


def check_target(target, overwrite, replaceable=None):
    """Raises `FileExistsError` naming `target` if it exists and may not be replaced.

    Args:
        target: The path to write.
        overwrite: Whether an existing `target` may be replaced.
        replaceable: None, or `(what, test)`: `test(target)` is True for
            what `overwrite` may replace, `what` names it in the error
            ("a SavedModel export"); anything else is never replaced.
    """
    target = os.path.abspath(os.fspath(target))
    if not os.path.lexists(target):
        return
    if not overwrite:
        raise FileExistsError(
            errno.EEXIST,
            f"Target already exists: {target!r}; pass overwrite=True "
            "(--overwrite on the command line) to replace it",
            target,
        )
    if replaceable is not None and not replaceable[1](target):
        raise FileExistsError(
            errno.EEXIST,
            f"Target {target!r} exists and is not {replaceable[0]}; --overwrite replaces "
            "only that, and nothing was changed: choose another path, or move it away",
            target,
        )


def fsync_directory(path):
    """Flushes a folder's entries (a rename in it) to disk."""
    descriptor = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_tree(root):
    """Flushes every file and folder under `root` to disk, folders last."""
    for folder, _, names in os.walk(root, topdown=False):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        fsync_directory(folder)


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
        fsync_directory(os.path.dirname(target))
        return
    parent, name = os.path.split(target)
    aside = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
    old = os.path.join(aside, name)
    os.rename(target, old)
    try:
        os.rename(staged, target)
        fsync_directory(parent)
    except BaseException:
        os.rename(old, target)
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def atomic_directory(target, overwrite=False, replaceable=None):
    """Yields a temporary directory that becomes `target` on success.

    Everything written into it is fsynced before the rename, and the parent
    folder after it.

    Args:
        target: Final directory path.
        overwrite: Replace an existing `target`; otherwise it is an error.
        replaceable: What `overwrite` may replace (`check_target`); None:
            anything.

    Yields:
        The path of an empty directory beside `target` to write into.

    Raises:
        FileExistsError: If `target` exists and `overwrite` is False, or it
            is not `replaceable` (raised before anything is written).
    """
    target = os.path.abspath(os.fspath(target))
    check_target(target, overwrite, replaceable)
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    staged = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
    try:
        # mkdtemp makes it 0700, which would hide the model from a server user.
        os.chmod(staged, 0o755)
        yield staged
        # Something may have appeared meanwhile.
        check_target(target, overwrite, replaceable)
        fsync_tree(staged)
        _swap_into_place(staged, target)
    except BaseException:
        _remove(staged)
        raise


@contextlib.contextmanager
def atomic_path(target):
    """Yields a temporary path beside `target` that replaces it on success.

    For writers that take a path (`model.save`, `np.savez`): the temporary
    keeps `target`'s extension, is fsynced and renamed over `target`, and
    the folder fsynced; on an error it is removed and `target` is untouched.
    """
    target = os.path.abspath(os.fspath(target))
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    descriptor, staged = tempfile.mkstemp(
        prefix=f".{name}.tmp-", suffix=os.path.splitext(name)[1], dir=parent)
    os.close(descriptor)
    try:
        yield staged
        with open(staged, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(staged, 0o644)  # mkstemp creates 0600.
        os.replace(staged, target)
        fsync_directory(parent)
    except BaseException:
        _remove(staged)
        raise


def atomic_write_bytes(target, data, overwrite=False, replaceable=None):
    """Writes `data` to the file `target` atomically (temp file, then rename).

    Args:
        target: Final file path.
        data: The bytes to write.
        overwrite: Replace an existing `target`; otherwise it is an error.
        replaceable: What `overwrite` may replace (`check_target`); None:
            anything.

    Returns:
        The absolute path written.

    Raises:
        FileExistsError: If `target` exists and `overwrite` is False, or it
            is not `replaceable`.
    """
    target = os.path.abspath(os.fspath(target))
    check_target(target, overwrite, replaceable)
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    descriptor, staged = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=parent)
    try:
        os.chmod(staged, 0o644)  # mkstemp creates 0600.
        with os.fdopen(descriptor, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        check_target(target, overwrite, replaceable)
        if os.path.isdir(target) and not os.path.islink(target):
            _swap_into_place(staged, target)
        else:
            os.replace(staged, target)
            fsync_directory(parent)
    except BaseException:
        _remove(staged)
        raise
    return target


def atomic_write_text(target, text):
    """Writes `text` (UTF-8, lines as given) to `target` whole or not at all,
    replacing the file that is there."""
    return atomic_write_bytes(target, text.encode("utf-8"), overwrite=True)


def atomic_write_json(target, value, indent=2, sort_keys=False):
    """Writes `value` as JSON to `target` whole or not at all (see
    `atomic_write_text`); non-ASCII text is kept as it is."""
    return atomic_write_text(
        target, json.dumps(value, indent=indent, ensure_ascii=False, sort_keys=sort_keys))
