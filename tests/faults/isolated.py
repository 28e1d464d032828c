"""Run a snippet in a fresh Python process, so a crash (segfault, abort) fails the test instead of killing pytest."""
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """`code` run as ``python -c`` with `args` in sys.argv[1:], from the repository root; never raises on failure."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def expect_clean_exit(proc: subprocess.CompletedProcess) -> str:
    """The child's stdout, after asserting it exited normally (rc 0: no signal, no uncaught error)."""
    assert proc.returncode == 0, f"child exited with {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout
