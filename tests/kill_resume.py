"""SIGKILL a training command at a chosen checkpoint (the resume tests).

`kill_at_checkpoint(process, run_dir, should_kill)` polls the run's resume
pointer and kills `process` the moment it names a step `should_kill`
accepts, so the run dies between two checkpoints as a power cut would.
`alongside(command)` runs the uninterrupted reference command beside it.
"""

import contextlib
import signal
import subprocess
import time


def checkpoint_step(run_dir):
    """The step of the run's latest resume checkpoint, or None."""
    pointer = run_dir / "checkpoints" / "resume" / "LATEST"
    if not pointer.exists():
        return None
    return int(pointer.read_text().strip().split("-")[1])


def kill_at_checkpoint(process, run_dir, should_kill, timeout=240):
    """SIGKILLs `process` once its latest checkpoint's step passes
    `should_kill(step)`; returns the step it was killed at."""
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        step = checkpoint_step(run_dir)
        if step is not None and should_kill(step):
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run finished before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    return checkpoint_step(run_dir)


@contextlib.contextmanager
def alongside(command, timeout=300, **popen_kwargs):
    """Runs `command` in the background during the block (the uninterrupted
    reference beside the run to kill). After the block it must exit with 0;
    if the block fails, it is killed rather than left running."""
    process = subprocess.Popen(command, **popen_kwargs)
    try:
        yield process
    except BaseException:
        process.kill()
        process.wait()
        raise
    assert process.wait(timeout=timeout) == 0, f"{command} exited with {process.returncode}"
