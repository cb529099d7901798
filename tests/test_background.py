"""tests/background.py: the checks that start with the session run in other
processes, the costliest first, and a test reads what each returned."""

import os

import background


def test_started_checks_run_elsewhere_costliest_first_and_others_run_here():
    prepared = []
    checks = background.Checks(workers=1)  # one process: they run in the order started
    checks.define("cheap", 1, "time", "monotonic")
    checks.define("dear", 5, "time", "monotonic", prepare=lambda: prepared.append("dear"))
    checks.define("pid", 3, "os", "getpid")
    checks.define("sum", 2, "builtins", "sum", [1, 2, 3])
    checks.define("not selected", 4, "os", "getpid")
    try:
        checks.start(["cheap", "sum", "dear", "pid", "never declared"])
        assert prepared == ["dear"]  # here, before it started
        assert checks.result("sum") == 6
        assert checks.result("pid") != os.getpid()
        assert checks.result("dear") < checks.result("cheap")
        checks.wait_all()
        assert checks.result("not selected") == os.getpid()
    finally:
        checks.stop()
