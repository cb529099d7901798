"""README.md and the results history point at things that exist.

The Results table gives short cells and links to `benchmarks/results/HISTORY.md`
for the runs behind them; a renamed heading or a moved result file would
leave a reader at a dead link.  These checks read the Markdown only.
"""

import functools
import re

import pytest

from tests.conftest import REPO_ROOT

DOCS = ("README.md", "benchmarks/results/HISTORY.md")
RESULTS = REPO_ROOT / "benchmarks" / "results"
#: A repository path in backticks: `training/recipe/adaptive.py`, `benchmarks/results/x.json`.
REPO_PATH = re.compile(r"`((?:benchmarks|training|keras_transformer|export|notebooks|tests)/[\w./-]+)`")
#: A results file named alone: `quality_translation_de-en_10_run12.json`.
RESULT_NAME = re.compile(r"`((?:quality|text_recipe|series_recipe|training_throughput)[\w.-]*\.jsonl?)`")
#: A relative Markdown link, with its optional anchor.
LINK = re.compile(r"\]\((?!https?:)([^)#\s]+)(?:#([^)\s]+))?\)")


def github_anchor(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


@functools.cache
def anchors(path):
    text = path.read_text(encoding="utf-8")
    return {github_anchor(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_github_anchor_follows_githubs_rule():
    assert github_anchor("Multi30k de->en in ten minutes") == "multi30k-de-en-in-ten-minutes"
    assert github_anchor("Kim's (2014) other four sentence sets") == "kims-2014-other-four-sentence-sets"
    assert github_anchor("SST-2 and TREC") == "sst-2-and-trec"


@pytest.mark.parametrize("doc", DOCS)
def test_links_reach_a_file_and_a_heading(doc):
    source = REPO_ROOT / doc
    links = LINK.findall(source.read_text(encoding="utf-8"))
    broken = []
    for target, anchor in links:
        path = (source.parent / target).resolve()
        if not path.exists():
            broken.append(target)
        elif anchor and anchor not in anchors(path):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{doc} links to what does not exist: {broken}"


@pytest.mark.parametrize("doc", DOCS)
def test_named_paths_and_result_files_exist(doc):
    text = (REPO_ROOT / doc).read_text(encoding="utf-8")
    missing = [p for p in REPO_PATH.findall(text) if not (REPO_ROOT / p.split("::")[0]).exists()]
    missing += [n for n in RESULT_NAME.findall(text) if not (RESULTS / n).exists()]
    assert not missing, f"{doc} names files that do not exist: {sorted(set(missing))}"


def test_readme_links_every_section_of_the_history():
    """Each section of HISTORY.md holds the runs behind one README row, which links to it."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    history = (RESULTS / "HISTORY.md").read_text(encoding="utf-8")
    sections = {github_anchor(h) for h in re.findall(r"^## (.+)$", history, flags=re.M)}
    assert len(sections) >= 6
    assert set(re.findall(r"HISTORY\.md#([\w-]+)", readme)) == sections
