"""The limits both hostile-file child processes (sandbox_child.py, tools_child.py) run under: the address
space may grow by ``mem_mb`` beyond what torch itself took, and CPU time is capped at ``cpu_s``."""
from __future__ import annotations

import resource


def vm_bytes() -> int:
    """This process's address space now (VmSize), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def apply(spec: dict, mem_mb: int, cpu_s: int) -> None:
    """Cap memory and CPU time from the jobs file's ``mem_mb`` / ``cpu_s`` (the defaults given here)."""
    limit = vm_bytes() + spec.get("mem_mb", mem_mb) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cpu = spec.get("cpu_s", cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
