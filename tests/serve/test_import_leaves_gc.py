"""`import tracejit` pauses the cyclic garbage collector for the import only (tracejit/__init__.py:
~90 ms of a server's start): the caller's setting is left as it was, whichever it was."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("enabled", [True, False])
def test_import_leaves_the_callers_gc_setting(enabled):
    code = ("import gc, torch\n"
            f"gc.enable() if {enabled} else gc.disable()\n"
            "import tracejit\n"
            "print(gc.isenabled(), tracejit.trace(lambda x: x * 2, torch.ones(2))(torch.arange(3.0)).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == f"{enabled} [0.0, 2.0, 4.0]"
