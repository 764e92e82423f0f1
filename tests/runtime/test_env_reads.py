"""Every environment variable is read through `kunlun_triton/runtime/env.py`
and listed in docs/environment.md.

The package and its scripts are grepped (the source, not a run: a read on
a path no test takes is caught too) for raw ``os.environ`` / ``os.getenv``
reads outside env.py. Writes (``os.environ[X] = ...``, ``setdefault``,
``pop``) are not reads. The allow-list holds the justified exceptions, each
with its reason.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "kunlun_triton").rglob("*.py"), *(ROOT / "scripts").glob("*.py")])

RAW_READ = re.compile(
    r"os\.getenv\(|os\.environ\.get\(|\bin os\.environ\b|os\.environ\.(items|keys|values|copy)\(|dict\(os\.environ"
    r"|os\.environ\[[^\]]+\](?!\s*=[^=])"
)
# (file, text of the line) -> why a raw read is right there
ALLOWED = {
    ("kunlun_triton/runtime/env.py", None): "the one reader",
    ("kunlun_triton/introspect/aot.py", "os.environ.items()"): "the AOT child's environment: a copy of ours "
    "without TRITON_INTERPRET, not a read of one variable",
    ("scripts/sampling_counts.py", "os.environ.items()"): "the same for its compile child",
    ("scripts/bench_serving.py", "dict(os.environ"): "the servers' environment: a copy of ours plus one variable",
}


def _allowed(rel: str, line: str) -> bool:
    return any(path == rel and (text is None or text in line) for path, text in ALLOWED)


def test_no_raw_environment_reads_outside_env_py():
    found = []
    for path in SOURCES:
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if RAW_READ.search(line) and not _allowed(rel, line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "read these through kunlun_triton/runtime/env.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    ['x = os.environ.get("A")', 'if "A" in os.environ:', 'v = os.environ["A"]', "e = dict(os.environ, A='1')",
     'os.getenv("A")', "env = {k: v for k, v in os.environ.items()}"],  # fmt: skip
)
def test_the_grep_sees_reads(line):
    assert RAW_READ.search(line)


@pytest.mark.parametrize("line", ['os.environ["A"] = "1"', 'os.environ.setdefault("A", "1")', 'os.environ.pop("A", None)'])
def test_the_grep_lets_writes_pass(line):
    assert not RAW_READ.search(line)


READERS = r"(?:env_str|env_flag|env_choice|env_int|env_float|env_is_set|cached_flag|raw_env_token)"
NAMED_READ = re.compile(READERS + r"\(\s*[\"']([A-Z][A-Z0-9_]+)[\"']")
NAME_CONSTANT = re.compile(r"^[A-Z_]*ENV\s*=\s*[\"']([A-Z][A-Z0-9_]+)[\"']", re.M)
READ_IN_A_LOOP = re.compile(r"\([\"']([A-Z][A-Z0-9_]+)[\"'],\s*(?:True|False)\)")  # tools/arguments.py's switches


def test_every_variable_read_is_in_the_docs_table():
    names = set()
    for path in SOURCES:
        text = path.read_text()
        names |= set(NAMED_READ.findall(text)) | set(NAME_CONSTANT.findall(text)) | set(READ_IN_A_LOOP.findall(text))
    assert {"KUNLUN_TRITON_CHECK", "KUNLUN_TRITON_CONFIG_DIR", "TRITON_INTERPRET", "SGLANG_PLATFORM"} <= names
    table = (ROOT / "docs" / "environment.md").read_text()
    missing = sorted(n for n in names if f"`{n}" not in table)
    assert not missing, f"docs/environment.md does not list {missing}"
