"""Importing alignmt puts torch's large CPU tensors on transparent huge pages, unless the user
said otherwise."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Faults taken to fill a fresh 64 MiB tensor, after importing alignmt.
FAULTS = """
import resource
import alignmt, torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.empty(16 * 2**20).fill_(1.0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"} | env
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_users_setting_wins():
    code = "import os, alignmt; print(os.environ['THP_MEM_ALLOC_ENABLE'])"
    assert run(code) == "1"
    assert run(code, THP_MEM_ALLOC_ENABLE="0") == "0"


THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.mark.skipif(
    not THP.exists() or "[never]" in THP.read_text(), reason="no transparent huge pages here"
)
def test_a_large_tensor_faults_in_huge_pages():
    four_kib_pages = 64 * 2**20 // 4096
    assert int(run(FAULTS, THP_MEM_ALLOC_ENABLE="0")) >= four_kib_pages // 2
    assert int(run(FAULTS)) < four_kib_pages // 8
