"""The tutorial notebooks: in sync with their sources, and they run (small mode).

Each notebook ends with assertions on what it showed (accuracy above chance,
SavedModel equal to Keras, BLEU above a floor, ...), so executing it is the
test. CI runs them with `KT_NOTEBOOK_SIZE=small`, beside the in-process tests
(tests/background.py); all seven take about four minutes alone on a quiet
2-core machine. The notebooks that read ../shared/data
(2 and 3) fall back to generated data by themselves when it is absent.
"""

import pathlib
import sys

import background
import nbformat
import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))

import build_notebooks  # noqa: E402

NAMES = build_notebooks.notebook_names()
CELL_TIMEOUT = 300  # seconds for any one cell in small mode


def _cells(notebook):
    """(type, source) of every cell, the first cell without its outputs note."""
    cells = [(cell.cell_type, cell.source) for cell in notebook.cells]
    kind, source = cells[0]
    kept = [
        line
        for line in source.splitlines()
        if not line.startswith(build_notebooks.OUTPUTS_NOTE)
    ]
    return [(kind, "\n".join(kept).rstrip())] + cells[1:]


def test_there_are_seven_notebooks_with_saved_sizes():
    assert len(NAMES) == 7, NAMES
    assert set(NAMES) == set(build_notebooks.SAVED_SIZE)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_matches_its_source(name):
    """The committed .ipynb is what build_notebooks.py makes of sources/<name>.py."""
    committed = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(committed)
    assert _cells(committed) == _cells(build_notebooks.build(name)), (
        f"notebooks/{name}.ipynb is out of date: run python3 notebooks/build_notebooks.py "
        f"--execute {name}"
    )
    note = committed.cells[0].source.splitlines()[-1]
    assert note.startswith(build_notebooks.OUTPUTS_NOTE), note


#: Seconds each takes alone in small mode (2026-11-28, 2-core machine; 03 on
#: 2026-12-03, with its task-model section): the background pool starts the
#: longest first.
SMALL_MODE_COST = {
    "03_translation": 96, "04_export_serving": 64, "05_time_series": 35,
    "02_text_classification": 33, "07_scaling_out": 29, "06_vision_transformer": 19,
    "01_attention": 8,
}
for _name in NAMES:
    background.define(
        f"notebook {_name}", SMALL_MODE_COST.get(_name, 0), "build_notebooks",
        "run_committed", _name, "small", CELL_TIMEOUT,
        # Here, before any notebook starts, so that two processes never both
        # install the kernel (it installs only when none is found).
        prepare=build_notebooks.ensure_kernel,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.background(f"notebook {name}")) for name in NAMES],
)
def test_notebook_runs_in_small_mode(name):
    """Executes the committed notebook (in a background process: see
    tests/background.py); its last cell asserts what it showed."""
    printed = background.result(f"notebook {name}")
    assert "All checks passed." in printed, printed
