"""benchmarks/core.py --quick runs to its end, and every check it prints passes."""

import subprocess
import sys

from conftest import ROOT


def test_core_benchmark_quick_runs_to_its_end():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "core.py"), "--quick"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "## solve with exhaustive certificate" in out and "load average" in out.splitlines()[-1]
    rows = [line.split() for line in out.splitlines() if line[:3].strip().isdigit()]
    assert any(r[1] == "float32" for r in rows) and any(r[1] == "float64" for r in rows)
    assert " NO" not in out  # every game certified, planted groups recovered, same as the references
