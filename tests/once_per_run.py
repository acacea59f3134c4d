"""Costly module fixtures built once per test run, not once per pytest-xdist worker.

`make test` runs the parallel phase in three xdist workers; a module-scoped fixture is built in every worker that
runs one of the module's tests, and xdist deals a module's tests to several. tests/serve/test_serve_hf.py's
``served`` (four models traced twice, saved and served in fresh processes: about 52 s) was built in each of them,
side by side. ``each_once_per_run`` splits such a build into parts (one per model): a worker that needs the fixture builds
each part no other worker has claimed (a file lock in the directory the run's workers share,
``getbasetemp().parent``, taken without waiting), writes its JSON-able value there, and then waits for and reads
the parts other workers claimed. Workers that ask at once split the work instead of each doing all of it.
It follows pytest-xdist's recipe "Making session-scoped fixtures execute only once", with ``filelock``'s lock
(a dependency of torch, named in the test extras).

A part whose build fails writes nothing: a worker that waited for it builds it again and fails the same way, so
each worker's tests report the failure. Outside xdist every part is built here, in a fresh directory.

>>> import os, pathlib, tempfile
>>> class Factory:   # the two methods of pytest's tmp_path_factory used here
...     base = pathlib.Path(tempfile.mkdtemp()) / "popen-gw0"
...     def getbasetemp(self): return self.base
...     def mktemp(self, name): return pathlib.Path(tempfile.mkdtemp(prefix=name))
>>> built = []
>>> build = lambda part, directory: built.append(part) or part.upper()
>>> os.environ["PYTEST_XDIST_WORKER"] = "gw0"
>>> each_once_per_run(Factory(), "demo", ["a", "b"], build)
{'a': 'A', 'b': 'B'}
>>> each_once_per_run(Factory(), "demo", ["a", "b"], build), built   # another worker reads them
({'a': 'A', 'b': 'B'}, ['a', 'b'])
>>> del os.environ["PYTEST_XDIST_WORKER"]
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

from filelock import FileLock, Timeout


def each_once_per_run(tmp_path_factory, name: str, parts, build: Callable[[str, Any], Any]) -> dict:
    """``{part: build(part, directory)}``, each part built by one worker of this run and read by the others."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return {part: build(part, tmp_path_factory.mktemp(f"{name}-{part}")) for part in parts}
    shared = tmp_path_factory.getbasetemp().parent
    values = {}
    for wait in (False, True):   # first the parts no worker holds, then wait for the others'
        for part in parts:
            if part in values:
                continue
            lock = FileLock(str(shared / f"{name}-{part}.lock"))
            try:
                lock.acquire(timeout=-1 if wait else 0)
            except Timeout:
                continue
            try:
                values[part] = _read_or_build(shared, f"{name}-{part}", lambda d, p=part: build(p, d))
            finally:
                lock.release()
    return {part: values[part] for part in parts}


def _read_or_build(shared, key: str, build: Callable[[Any], Any]) -> Any:
    done = shared / f"{key}.json"
    if done.is_file():
        return json.loads(done.read_text())
    directory = shared / f"{key}-build"
    directory.mkdir(exist_ok=True)
    value = build(directory)
    partial = shared / f"{key}.json.partial"
    partial.write_text(json.dumps(value))
    partial.replace(done)
    return value
