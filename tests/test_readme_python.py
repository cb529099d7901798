"""Every Python block of README.md runs, in order, as a user pastes them.

The blocks run in one fresh interpreter in an empty folder (they write
`translator.keras` and `exported/`), so a renamed argument or a changed
answer shows here before a reader meets it.
"""

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

BLOCK = re.compile(r"```python\n(.*?)```", flags=re.S)


def readme_python_blocks():
    return BLOCK.findall((REPO_ROOT / "README.md").read_text(encoding="utf-8"))


def test_the_readme_task_model_blocks_fit_in_25_lines():
    blocks = readme_python_blocks()
    assert len(blocks) >= 2
    assert len(blocks[0].strip().splitlines()) <= 25  # a translator and a classifier
    assert "Translator" in blocks[0] and "TextClassifier" in blocks[0]
    series = [b for b in blocks if "TimeSeriesClassifier" in b]
    assert len(series) == 1 and len(series[0].strip().splitlines()) <= 25


@pytest.mark.slow
def test_the_readme_python_blocks_run(tmp_path):
    script = "\n".join(readme_python_blocks())
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=None)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "exported" / "translator" / "1" / "saved_model.pb").is_file()
    assert (tmp_path / "exported" / "classifier" / "1" / "assets" / "labels.txt").is_file()
    assert (tmp_path / "exported" / "series" / "1" / "saved_model.pb").is_file()
    # The answer's form (five epochs on 16 sentences need not learn the label).
    assert "'labels': array([" in done.stdout and "'probabilities'" in done.stdout, \
        done.stdout[-2000:]
