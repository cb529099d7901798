"""What every tutorial notebook does first.

The size switch (`KT_NOTEBOOK_SIZE`: "small", the CI size, or "full"),
TensorFlow's quiet start, the package on the path (with or without
`pip install -e .`), the shared data folder and scratch folders:

    from notebook_setup import DATA_DIR, REPO, SIZE, scratch_folder

A notebook runs with `notebooks/` as its working directory (Jupyter's way
for a notebook file, and `build_notebooks.execute`'s), where this module is.
"""

import os
import pathlib
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow loads
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
SIZE = os.environ.get("KT_NOTEBOOK_SIZE", "small")
if SIZE not in ("small", "full"):
    raise ValueError(f"KT_NOTEBOOK_SIZE must be 'small' or 'full'; received {SIZE!r}.")
REPO = pathlib.Path(__file__).resolve().parent.parent  # notebooks/ is REPO/notebooks
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the package, with or without `pip install -e .`
# The corpora the notebooks read when they are there (else they generate data).
DATA_DIR = pathlib.Path(os.environ.get("KT_DATA_DIR", REPO.parent / "shared" / "data"))
print(f"KT_NOTEBOOK_SIZE={SIZE}")


def scratch_folder(notebook):
    """A new temporary folder for a notebook's runs and files, never inside the repository."""
    return pathlib.Path(tempfile.mkdtemp(prefix=f"kt-{notebook}-"))
