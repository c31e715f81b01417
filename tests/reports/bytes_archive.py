"""What the bytes experiment's archive holds (reports/h200/bytes/), read the one way the
per-machine tests share: the records as servers, the README's per-server tables, the file
lists in a machine's logs and each table row's cells against what the server gave."""
from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_bytes_summary import load, servers  # noqa: E402

HERE = ROOT / "reports" / "h200" / "bytes"
README = (HERE / "README.md").read_text()
# (k, residue, phase) of each cell column of a per-server table, in order
COLUMNS = [(4, 5, "cold"), (4, 5, "self-hit"), (4, 4, "reset-cold"), (3, 4, "cold"),
           (3, 4, "self-hit")]


def records_of(machine: str) -> list[dict]:
    return load([HERE / f"records-{machine}.jsonl.gz"])


def servers_of(machine: str) -> dict[str, dict]:
    return servers(records_of(machine))


def table_rows(section: str) -> list[list[str]]:
    """The server rows of the first table under the README's ``section`` heading."""
    part = README.split(section)[1].split("\n\n")[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in part.splitlines()]
    return [r for r in rows if r[0].startswith("k")]


def file_lists(machine: str) -> dict[str, dict]:
    """Each server's compile-cache file list from the machine's logs (``{"files": [...]}``
    and, where the experiment wrote them, its kernel rows and folders)."""
    out = {}
    with tarfile.open(HERE / f"logs-{machine}.tgz") as tar:
        for m in tar.getmembers():
            name = Path(m.name).name
            if name.startswith("files-"):
                data = json.loads(tar.extractfile(m).read())
                out[name[len("files-"):-len(".json")]] = (
                    data if isinstance(data, dict) else {"files": data})
    return out


def signature(files: list) -> tuple[int, int]:
    """(.best_config files, files): 17/71 where the compile padded the matmul, 14/65 not."""
    return sum(1 for f in files if f[0].endswith(".best_config")), len(files)


def assert_cells(server: dict, name: str, cells: list[str]) -> None:
    """A table row's cells (``ok `sha`` / ``not ok `sha`` / ``–``) are what ``server`` gave."""
    for (k, residue, phase), text in zip(COLUMNS, cells):
        got = server["cells"].get((residue, phase)) if server["k"] == k else None
        want = None if text == "–" else (text.startswith("ok"), text.split("`")[1])
        assert got == want, (name, residue, phase)


def ready_boots(machine: str, uuid: str) -> list[dict]:
    """The boots that came up, each on ``uuid``, an H100 80GB HBM3."""
    ready = [r for r in records_of(machine) if r.get("boot") == "ready"]
    assert {g["uuid"] for r in ready for g in r["gpu"]} == {uuid}
    assert {g["model"] for r in ready for g in r["gpu"]} == {"NVIDIA H100 80GB HBM3"}
    return ready
