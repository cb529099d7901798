"""The package's layers point only down, and no module imports itself back.

Every import of the package's modules is read from the source (top-level
and inside functions alike, so an import "on use" cannot hide a cycle),
and checked against the layers of docs/architecture.md, lowest first.

The command line (`cli/`) is the one package that imports both `training`
and `export`.  `training/__main__.py` and `export/__main__.py` are entry
points, not modules of their package: `python -m training` and `python -m
export` run them, and they only hand over to the command line, so they sit
in its layer and may import it.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("keras_transformer", "training", "export", "cli")

# Lowest first; a module may import its own layer or one below it.  A
# module belongs to the longest prefix that names it.
LAYERS = (
    ("training", "export"),  # the packages' own (empty) __init__ files
    ("keras_transformer",),  # the modeling library: layers, models, decoding
    ("training.data",),
    ("training.text",),
    ("training.pipeline",),
    ("training.recipe",),
    ("training.optimization",),
    ("training.monitor",),
    ("training.serving",),
    ("training.task_models",),  # the task models a user builds: backbones + preprocessing
    ("training.tasks",),
    ("training.config",),
    ("training.runs",),
    ("training.distribute", "training.loop", "training.train", "training.estimator"),
    ("export.quantize", "export.fresh_process", "export.saved_model_cli",
     "export.serving_ops", "export.saved_model", "export.tflite", "export.tflite_verify", "export.verify",
     "export.ctranslate2", "export.server"),
    ("cli", "training.__main__", "export.__main__"),
)

#: The packages each package may not import, entry points aside: only the
#: command line imports both training and export.
FORBIDDEN = {
    "keras_transformer": ("training", "export", "cli"),
    "training": ("export", "cli"),
    "export": ("cli",),
}
#: Where imports inside functions are held to a list: what the command line
#: and the exporters run, and the training modules below them.
ON_USE_SCOPE = ("cli", "export", "training.data", "training.text", "training.pipeline",
                "training.monitor", "training.serving", "training.runs")
#: The imports inside functions there, each kept for the reason its comment
#: gives: {module: {imported module or name}}.
IMPORTS_ON_USE = {
    # After parsing: `--help` and a bad argument stay free of TensorFlow.
    "cli.training_commands": {"cli.training_handlers"},
    "cli.export_commands": {"cli.export_handlers"},
    # TensorFlow imported with its start-up lines captured, by a command that runs.
    "cli.quiet": {"tensorflow", "tensorflow_text"},
    # The optional extra: without it, one error line.
    "export.ctranslate2": {"ctranslate2", "ctranslate2.converters", "ctranslate2.specs"},
    # A fresh process imports the module to read TensorFlow's op registry alone.
    "export.serving_ops": {"tensorflow_text"},
    # The optional extra `serve` (Starlette, uvicorn): without it, one error line.
    "export.server.main": {"export.server.runtime.Server"},
}


def _modules():
    """{dotted name: path} of every module of the package."""
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _imports(name, path, modules):
    """{imported module: line} of the package's modules that `name` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = {}

    def add(target, line):
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in modules else base, node.lineno)
    return found


def _graph():
    modules = _modules()
    return modules, {n: _imports(n, p, modules) for n, p in modules.items()}


def _layer(name):
    best = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[1]):
                    best = (index, prefix)
    return None if best is None else best[0]


def find_cycle(graph):
    """One import cycle as a list of modules (first == last), or None."""
    state = {}  # 1: on the current path, 2: done
    path = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycle():
    _, graph = _graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}}) is None


def test_every_module_has_a_layer():
    modules, _ = _graph()
    assert [m for m in sorted(modules) if _layer(m) is None] == []


def test_imports_point_down():
    modules, graph = _graph()
    upward = [
        f"{modules[name].relative_to(ROOT)}:{line} imports {target} "
        f"(layer {_layer(target)} above {_layer(name)})"
        for name, targets in sorted(graph.items())
        for target, line in sorted(targets.items())
        if _layer(target) > _layer(name)
    ]
    assert upward == []


def is_entry_point(name):
    """Whether `name` is a `__main__` module, the script of `python -m PACKAGE`."""
    return name.rpartition(".")[2] == "__main__"


def forbidden_imports(graph):
    """["module imports target", ...] for each import `FORBIDDEN` refuses."""
    return [
        f"{name} imports {target}"
        for name, targets in sorted(graph.items())
        if not is_entry_point(name)
        for target in sorted(targets)
        if target.split(".")[0] in FORBIDDEN.get(name.split(".")[0], ())
    ]


def test_only_the_command_line_imports_both_training_and_export():
    modules, graph = _graph()
    assert forbidden_imports(graph) == []
    # A package's own modules aside, which modules import both packages.
    both = {name for name, targets in graph.items()
            if {"training", "export"} <= {t.split(".")[0] for t in targets}
            - {name.split(".")[0]}}
    assert both and {name.split(".")[0] for name in both} == {"cli"}


def test_the_package_rule_finds_a_forbidden_import():
    graph = {"training.train": {"export.saved_model": 3, "training.config": 4},
             "export.verify": {"training.tasks": 5, "cli.errors": 6},
             "training.__main__": {"cli.training_commands": 7},
             "cli.main_job": {"training.train": 8, "export.saved_model": 9}}
    assert forbidden_imports(graph) == [
        "export.verify imports cli.errors", "training.train imports export.saved_model",
    ]


def imports_inside_functions(path):
    """The modules (`import m`) and names (`from m import n`: "m.n") imported
    inside the functions of the file at `path`."""
    found = set()
    for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_imports_inside_functions_are_the_listed_ones():
    modules, _ = _graph()
    found = {
        name: imported
        for name, path in sorted(modules.items())
        if name.startswith(ON_USE_SCOPE) and (imported := imports_inside_functions(path))
    }
    assert found == IMPORTS_ON_USE


def test_imports_inside_functions_are_found(tmp_path):
    path = tmp_path / "lazy.py"
    path.write_text("import os\n\ndef f():\n    import keras\n    if os:\n"
                    "        from training.tasks import get_task\n")
    assert imports_inside_functions(path) == {"keras", "training.tasks.get_task"}


@pytest.mark.parametrize("source, target", [
    ("import training.train\n", "training.train"),
    ("def f():\n    from training.tasks import get_task\n", "training.tasks"),
    ("from .tokenizers import word_ids\n", "training.text.tokenizers"),
])
def test_imports_are_read_inside_functions_and_relative(tmp_path, source, target):
    path = tmp_path / "detokenize.py"
    path.write_text(source)
    modules = {"training.train": None, "training.tasks": None,
               "training.text.tokenizers": None, "training.text.detokenize": path}
    assert target in _imports("training.text.detokenize", path, modules)


def _frameworks_imported(package, frameworks):
    """`path:line` of each import of `frameworks` (top-level names) under `package`."""
    offenders = []
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names
                          if n.split(".")[0] in frameworks]
    return offenders


def test_training_recipe_imports_no_tensorflow_or_keras():
    """The recipe is arithmetic over measurements (STYLE.md, habit 18): the
    loop measures and applies, with TensorFlow and Keras."""
    assert _frameworks_imported("training/recipe", ("tensorflow", "keras", "tf_keras")) == []
    assert _frameworks_imported("keras_transformer", ("keras",)) != []  # the reader finds imports


def test_training_recipe_loads_without_tensorflow_or_keras():
    """Importing every module of training.recipe loads neither framework
    (a module they import indirectly, through another package, counts too)."""
    modules = sorted(n for n in _modules() if n == "training.recipe" or
                     n.startswith("training.recipe."))
    code = (f"import sys\nfor name in {modules!r}:\n    __import__(name)\n"
            "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    assert len(modules) >= 4 and result.stdout.strip() == "[]", result.stdout


def test_the_modeling_library_uses_no_tensorflow():
    """keras_transformer's layers, models and decoding are keras.ops only (JAX too)."""
    offenders = []
    for path in (ROOT / "keras_transformer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names
                          if n.split(".")[0] in ("tensorflow", "tensorflow_text")]
    assert offenders == []


#: Names with a leading underscore that are public API of their module.
PUBLIC_UNDERSCORE = {
    "os._exit",  # the documented way to end a process without the interpreter's teardown
}


def private_reads(source):
    """`obj._name` reads in `source` where `obj` is not the object's own class:
    not `self`, `cls` or `super()`, nor a name bound to `cls(...)` (an
    object the class makes), and not listed in `PUBLIC_UNDERSCORE`."""
    tree = ast.parse(source)
    own = {"self", "cls"}
    for node in ast.walk(tree):  # names bound to an instance the class makes itself
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "cls"):
            own |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in own:
            continue
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "super":
            continue
        if ast.unparse(node) in PUBLIC_UNDERSCORE:
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_modules_read_no_private_attribute_of_another_object():
    """What another module needs of a class is a public property or method."""
    reads = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found = private_reads(path.read_text(encoding="utf-8"))
            if found:
                reads[str(path.relative_to(ROOT))] = found
    assert reads == {}


def test_the_private_read_finder_finds_one():
    source = (
        "class A:\n"
        "    def f(self, other):\n"
        "        self._mine = super()._base()\n"
        "        return other._theirs + self._mine\n"
        "    @classmethod\n"
        "    def make(cls):\n"
        "        made = cls()\n"
        "        made._setup()\n"
        "        return made\n"
        "def g(model):\n"
        "    return model._flatten_layers(), os._exit\n"
    )
    assert private_reads(source) == ["4: other._theirs", "11: model._flatten_layers"]


#: Parameters that would make an exporter take the pipeline's objects.
PIPELINE_PARAMETERS = {"task", "task_or_tokenizer", "run_or_model"}


def _pipeline_parameters(source, name):
    """'name:line function(parameter)' for each public function of `source`
    that takes one of `PIPELINE_PARAMETERS`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            found += [f"{name}:{node.lineno} {node.name}({a.arg})" for a in arguments
                      if a.arg in PIPELINE_PARAMETERS]
    return found


def test_the_exporters_take_a_model_never_a_task():
    """export/'s functions (the SavedModel, TFLite and CTranslate2 exporters
    and their verification) take a model: a task model, or a library
    backbone with its tokenizer and class names, so a user's own model
    exports and verifies as a run's does."""
    found = [hit for path in sorted((ROOT / "export").glob("*.py"))
             for hit in _pipeline_parameters(path.read_text(), path.name)]
    assert found == []


def test_the_pipeline_parameter_finder_finds_one():
    source = "def export(model, task):\n    pass\n\ndef _inner(task):\n    pass\n"
    assert _pipeline_parameters(source, "x.py") == ["x.py:1 export(task)"]
