"""What a folder this package wrote is, and what its files should hold.

A run directory, an export and a prepared corpus each carry a small JSON
record of what they are:

    {"format": "keras-transformer run", "format_version": 1,
     "package_version": "0.1.0", ...}

`format_version` is the layout's version (`FORMAT_VERSION`), raised when a
reader of the previous one would misread the new one; `package_version`
only says which release wrote it.  A reader refuses a layout newer than its
own in one line that says what to do (`check_format`).

A finished folder also records its files (`MANIFEST`): the size and SHA-256
of each, written last.  `check_manifest` reads every file listed and names
the first that differs (cut short by a full disk, edited, lost), so nothing
answers from a half-written vocabulary or model.
"""

import hashlib
import os
import warnings

from keras_transformer import __version__
from training.data.atomic import atomic_write_json
from training.data.readers import read_json

#: The version of the layouts this code writes, and the newest it reads.
FORMAT_VERSION = 1
#: The file recording a finished folder's files.
MANIFEST = "manifest.json"
_CHUNK = 1 << 20


def format_record(kind, **extra):
    """The record saying a folder is a `kind` ("run", "saved_model", ...) of this version."""
    return {"format": f"keras-transformer {kind}", "format_version": FORMAT_VERSION,
            "package_version": __version__, **extra}


def check_format(record, kind, path, remedy):
    """Raises ValueError in one line unless `record` is a `kind` this code reads.

    Args:
        record: The JSON value read from `path`.
        kind: The kind expected ("run", "saved_model", ...).
        path: The file it was read from (named in the error).
        remedy: What else the user can do, e.g. "train the run again with
            this version"; the error says to upgrade first.
    """
    expected = f"keras-transformer {kind}"
    if not isinstance(record, dict) or record.get("format") != expected:
        found = record.get("format") if isinstance(record, dict) else record
        raise ValueError(f"{path!r} does not describe a {expected} (its format is {found!r}); "
                         f"{remedy}.")
    version = record.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{path!r} has format_version={version!r}, not a version of the "
                         f"{expected} layout; {remedy}.")
    if version > FORMAT_VERSION:
        written_by = record.get("package_version", "a newer release")
        raise ValueError(
            f"{path!r} is a {expected} of format version {version} (written by "
            f"keras-transformer {written_by}); this keras-transformer {__version__} reads "
            f"version {FORMAT_VERSION} at most: upgrade keras-transformer, or {remedy}.")


def file_digest(path):
    """{"size": bytes, "sha256": hex} of a file, read in 1-MiB chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def _listed_files(folder, skip):
    """Relative POSIX paths of the files under `folder`, sorted, but `skip`'s
    names and folders (and `MANIFEST` itself)."""
    skip = set(skip) | {MANIFEST}
    files = []
    for root, dirs, names in os.walk(folder):
        relative_root = os.path.relpath(root, folder)
        prefix = "" if relative_root == "." else relative_root.replace(os.sep, "/") + "/"
        dirs[:] = sorted(d for d in dirs if prefix + d not in skip)
        files += [prefix + name for name in names if prefix + name not in skip]
    return sorted(files)


def write_manifest(folder, kind, skip=()):
    """Records the size and SHA-256 of every file under `folder` in its
    `MANIFEST` (written whole or not at all); returns the record.

    Args:
        folder: The finished folder.
        kind: What it is (`format_record`).
        skip: Relative paths of files or folders left out (a lock file,
            summaries that are not read back).
    """
    folder = os.fspath(folder)
    files = {name: file_digest(os.path.join(folder, *name.split("/")))
             for name in _listed_files(folder, skip)}
    record = format_record(kind, files=files)
    atomic_write_json(os.path.join(folder, MANIFEST), record, indent=1, sort_keys=True)
    return record


def check_manifest(folder, kind, what, remedy):
    """Raises ValueError naming the first file of `folder` that differs from
    its `MANIFEST` (missing, another size, another SHA-256).

    Args:
        folder: A folder `write_manifest` wrote a manifest into.
        kind: What it should be (`check_format`).
        what: How the error names the folder ("run_dir='runs/a'").
        remedy: What the user can do instead (`check_format`).

    Raises:
        FileNotFoundError: If there is no `MANIFEST`.
        ValueError: On a manifest of another kind or a newer version, or a
            file that differs.
    """
    folder = os.fspath(folder)
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} has no {MANIFEST}; {remedy}.")
    record = read_json(path, what)
    check_format(record, kind, path, remedy)
    files = record.get("files")
    if not isinstance(files, dict):
        raise ValueError(f"{path!r} lists no files; the manifest is damaged: {remedy}.")
    for name, expected in sorted(files.items()):
        file_path = os.path.join(folder, *name.split("/"))
        if not os.path.isfile(file_path):
            raise ValueError(f"{what}: {name} is missing (its {MANIFEST} lists it); {remedy}.")
        actual = file_digest(file_path)
        if actual["size"] != expected.get("size"):
            raise ValueError(
                f"{what}: {name} has {actual['size']} bytes where its {MANIFEST} recorded "
                f"{expected.get('size')} (cut short or changed); not used: {remedy}.")
        if actual["sha256"] != expected.get("sha256"):
            raise ValueError(
                f"{what}: {name} differs from the SHA-256 its {MANIFEST} recorded "
                f"(changed or damaged); not used: {remedy}.")
    return record


#: The files a SavedModel export holds, by which one written before exports
#: carried a manifest is known (`export.saved_model`).
SAVED_MODEL_FILES = ("saved_model.pb", "assets/config.json")
#: What reading an export written before exports carried a manifest warns.
OLDER_EXPORT_WARNING = (
    "{what} was written before exports carried a format version (it has no "
    f"{MANIFEST}): read as it is, its files unchecked; export it again to have them checked."
)


def written_as(path, kind, older_files=()):
    """Whether `path` is a folder this package wrote as `kind`: its manifest
    says so, or, written before folders carried one, it holds every one of
    `older_files` (relative POSIX paths; none: never)."""
    path = os.fspath(path)
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    manifest = os.path.join(path, MANIFEST)
    if os.path.isfile(manifest):
        try:
            record = read_json(manifest, path)
        except ValueError:
            return False
        return isinstance(record, dict) and record.get("format") == f"keras-transformer {kind}"
    return bool(older_files) and all(
        os.path.isfile(os.path.join(path, *name.split("/"))) for name in older_files)


def check_written(path, kind, what, remedy, older_files=()):
    """Checks a folder `write_manifest` finished before anything reads it.

    With a manifest: `check_manifest` (a newer version refused, a file that
    differs named).  Written before folders carried one (`older_files` all
    there): read as it is, with a warning (`OLDER_EXPORT_WARNING`).

    Raises:
        FileNotFoundError: If `path` is neither.
        ValueError: As `check_manifest`.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{what} is not a folder (no such directory); pass the "
                                f"folder of a keras-transformer {kind} export.")
    if os.path.isfile(os.path.join(path, MANIFEST)):
        return check_manifest(path, kind, what, remedy)
    if older_files and written_as(path, kind, older_files):
        warnings.warn(OLDER_EXPORT_WARNING.format(what=what), UserWarning, stacklevel=2)
        return None
    raise FileNotFoundError(f"{what} is not a keras-transformer {kind} export (no {MANIFEST}); "
                            f"{remedy}.")


def check_saved_model_export(export_dir):
    """`check_written` for a SavedModel export (`export.saved_model`)."""
    export_dir = os.fspath(export_dir)
    return check_written(export_dir, "saved_model", f"--saved-model {export_dir!r}",
                         "export the run again (python -m export saved-model)",
                         SAVED_MODEL_FILES)
