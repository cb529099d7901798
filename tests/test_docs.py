"""README.md and the documents under docs/ point at things that exist.

The README's results table gives one-line cells and links to `docs/results.md`
and `docs/experiment-log.md` for the runs behind them; a renamed heading or a
moved result file would leave a reader at a dead link.  These checks read the
Markdown only, except the last, which reads every tracked text file.
"""

import functools
import re
import subprocess

import pytest

from tests.conftest import REPO_ROOT

DOCS = (
    "README.md",
    "docs/architecture.md",
    "docs/experiment-log.md",
    "docs/guide.md",
    "docs/recipe.md",
    "docs/results.md",
    "notebooks/README.md",
)
RESULTS = REPO_ROOT / "benchmarks" / "results"
LOG = REPO_ROOT / "docs" / "experiment-log.md"
#: The README stays a page a user reads: the details live under docs/.
README_MAX_BYTES = 13_000
README_MAX_LINE = 400
#: The project's history is told by dates and by what changed, not by work sessions.
SESSION_NUMBER = re.compile(r"sessions? [0-9]+", flags=re.I)
#: A path of the machine that ran something: scratch folders, home folders, an interpreter.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:tmp|root|home|work|Users)/")
#: A repository path in backticks: `training/recipe/adaptive.py`, `benchmarks/results/x.json`.
REPO_PATH = re.compile(r"`((?:benchmarks|training|keras_transformer|export|notebooks|tests|cli)/[\w./-]+)`")
#: A results file named alone: `quality_translation_de-en_10.json`.
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


def test_every_section_of_the_experiment_log_is_linked():
    """Each section of the experiment log holds the runs behind a result, which links to it."""
    sections = {github_anchor(h) for h in re.findall(r"^## (.+)$", LOG.read_text(encoding="utf-8"), flags=re.M)}
    assert len(sections) >= 6
    linked = set()
    for doc in DOCS:
        text = (REPO_ROOT / doc).read_text(encoding="utf-8")
        linked |= set(re.findall(r"experiment-log\.md#([\w-]+)", text))
    assert sections <= linked, f"sections no document links to: {sorted(sections - linked)}"


def test_readme_stays_short():
    readme = (REPO_ROOT / "README.md").read_bytes()
    assert len(readme) < README_MAX_BYTES, f"README.md is {len(readme)} bytes; move details under docs/"
    long_lines = [
        (number, len(line))
        for number, line in enumerate(readme.decode("utf-8").splitlines(), start=1)
        if len(line) > README_MAX_LINE
    ]
    assert not long_lines, f"README.md lines over {README_MAX_LINE} characters (line, length): {long_lines}"


def test_readme_gives_the_ci_test_command():
    """`.ci/run` runs exactly the test command the README gives a fresh machine."""
    ci_lines = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    command = ci_lines[-1].strip()
    assert command.startswith("python3 -m pip install") and "pytest" in command
    readme_blocks = re.findall(r"```bash\n(.*?)```", (REPO_ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    assert any(block.strip() == command for block in readme_blocks), (
        f"README.md has no bash block holding exactly the CI command {command!r}"
    )


def tracked_text_files():
    """(path, text) of every file git tracks, binary files left out."""
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, names):
        path = REPO_ROOT / name.decode("utf-8")
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        yield name.decode("utf-8"), data.decode("utf-8", errors="replace")


def test_no_file_names_a_work_session():
    found = [
        f"{name}:{number}: {match.group(0)}"
        for name, text in tracked_text_files()
        for number, line in enumerate(text.splitlines(), start=1)
        for match in [SESSION_NUMBER.search(line)]
        if match
    ]
    assert not found, "files that name a session instead of a date or a change:\n" + "\n".join(found)


def test_no_file_names_a_path_of_the_machine_that_made_it():
    """Result files, docs, code and the notebooks' stored outputs name run
    folders and data relative to the repository (runs/..., ../shared/data/...)
    and the interpreter as `python3`."""
    found = [
        f"{name}:{number}: {line.strip()[:120]}"
        for name, text in tracked_text_files()
        for number, line in enumerate(text.splitlines(), start=1)
        if MACHINE_PATH.search(line)
    ]
    assert not found, "files that name a path outside the repository:\n" + "\n".join(found)


def test_the_architecture_tree_and_table_name_every_package_folder():
    """docs/architecture.md draws the folder tree and lists the layers in a
    table: both name each folder of the packages and each module at their top."""
    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    tree = re.search(r"## Layout.*?```\n(.*?)```", text, flags=re.S).group(1)
    table = "\n".join(line for line in text.splitlines() if line.startswith("| "))
    missing = []
    for package in ("keras_transformer", "training", "export", "cli"):
        if f"{package}/" not in tree or f"`{package}/" not in table:
            missing.append(package)
        for path in sorted((REPO_ROOT / package).iterdir()):
            if path.name.startswith(("_", ".")) and path.name != "__main__.py":
                continue
            if path.is_dir() and not (path / "__init__.py").exists() and path.name != "configs":
                continue  # data folders (export/serving_ops/)
            if path.suffix not in (".py", "") or (package in ("export", "cli") and path.is_file()
                                                   and path.name != "__main__.py"):
                continue  # export's modules are layer 12 as a whole, cli's layer 13
            name = path.name + ("/" if path.is_dir() else "")
            if name not in tree:
                missing.append(f"tree: {package}/{name}")
            if f"{package}/{name}" not in table and f"`{name}`" not in table:
                missing.append(f"table: {package}/{name}")
    assert not missing, f"docs/architecture.md leaves out: {missing}"
