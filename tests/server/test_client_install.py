"""The base install (no extras) is a working device: FederatedClient completes a round (#16 item 8).

What this proves, and how it stays affordable. A fresh environment with a real torch download
takes minutes, so the environment is built from what this machine has, honestly restricted:

1. The pflkit wheel is built from this source tree; its metadata must list exactly the base
   requirements below, torch and torchvision as ranges.
2. A fresh venv (no system site-packages) gets the wheel (``--no-deps``) and, through a path
   file, a folder holding ONLY the distributions the wheel's base requirements pull in
   (their transitive closure, read from the installed packages' own metadata; symlinks, no
   copies). fastapi, sqlalchemy, matplotlib, scikit-learn, uvicorn are not in it, so they
   cannot be imported there at all; ``pip check`` then verifies the wheel's requirements and
   every chained distribution's are satisfied.
3. In that venv ``pfl-admin`` (the operator's tool) creates an enrollment token, and a
   process imports FederatedClient, enrolls against a real pfl-server (run from the test
   environment) and trains and uploads a round; it reports which modules it
   loaded. It does not prove that pip would pick these versions from an index (it resolves
   nothing): the resolver's part is the metadata check of step 1.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from server_harness import ADMIN, run_toml
from waiting import GUARD

from pflkit.sdk.builder import build_run
from pflkit.sdk.client import save_client_data
from pflkit.sdk.run_config import SimConfig

ROOT = Path(__file__).resolve().parents[2]
BASE = {"torch", "torchvision", "numpy", "safetensors", "pydantic", "httpx", "typer", "rich"}
SERVER_STACK = ("fastapi", "starlette", "sqlalchemy", "uvicorn", "pydantic_settings",
                "matplotlib", "sklearn")

DEVICE = """
import importlib.util, json, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from pflkit.sdk.client import FederatedClient, RetryPolicy, load_client_data
url, token, data = sys.argv[1:4]
client = FederatedClient(url, Path(data) / ".state", load_client_data(Path(data)), token=token,
                         retry=RetryPolicy(cap=1.0, max_elapsed=float(sys.argv[5])))
trained = client.run()
logits = client.personalized_model()(torch.zeros(2, 1, 28, 28))
print(json.dumps({
    "trained": trained, "logits": list(logits.shape),
    "loaded": sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[4].split(","))),
    "importable": [m for m in sys.argv[4].split(",") if importlib.util.find_spec(m)],
    "pflkit": str(Path(sys.modules["pflkit.sdk"].__file__).parent),
}))
"""


def _build_wheel(tmp: Path) -> Path:
    source = tmp / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "runs", "build", "dist", "*.egg-info", "__pycache__", "android-demo",
        "benchmarks", "tests"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp / "dist"), str(source)], check=True)
    (wheel,) = (tmp / "dist").glob("pflkit-*.whl")
    return wheel


def _base_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(name).decode().splitlines()
    reqs = [Requirement(line.split(":", 1)[1]) for line in lines
            if line.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def _closure(requirements: list[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions the requirements pull in, transitively (no extras)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(requirements)
    while todo:
        req = todo.pop()
        key = req.name.lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist = metadata.distribution(req.name)
        assert dist.version in req.specifier or not req.specifier, (req, dist.version)
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    return list(found.values())


def _chain(dists: list[metadata.Distribution], folder: Path) -> None:
    """Symlink each distribution's top-level files (packages, modules, dist-info) into folder."""
    folder.mkdir()
    for dist in dists:
        base = Path(dist.locate_file(""))
        tops = {f.parts[0] for f in dist.files or []} - {"..", "__pycache__"}
        for top in tops:
            if not top.endswith(".pth") and not (folder / top).exists():
                (folder / top).symlink_to(base / top)


def test_the_base_install_trains_a_round_without_the_server_stack(make_server, tmp_path):
    wheel = _build_wheel(tmp_path)
    requirements = _base_requirements(wheel)
    assert {r.name.lower() for r in requirements} == BASE
    for name in ("torch", "torchvision"):
        (req,) = [r for r in requirements if r.name == name]
        assert ">=" in str(req.specifier) and "==" not in str(req.specifier), req
    pins = (ROOT / "constraints.txt").read_text()
    assert "torch==2.14.1" in pins and "torchvision==0.29.1" in pins

    venv = tmp_path / "device"
    subprocess.run([Path(sysconfig.get_config_var("BINDIR")) / "python3", "-m", "venv",
                    "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    _chain(_closure(requirements), tmp_path / "chain")
    (site / "base-requirements.pth").write_text(str(tmp_path / "chain") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    subprocess.run([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    check = subprocess.run([*pip, "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    config = run_toml("fedavg", rounds=1, num_clients=1, per_round=1)
    server = make_server(config, "--min-enrolled", "1")
    data = tmp_path / "data"
    _write_client_data(config, data)
    # the operator's pfl-admin works from the same base install (no server stack there)
    admin = subprocess.run([venv / "bin" / "pfl-admin", "--url", server.url, "--token", ADMIN,
                            "tokens", "create"], capture_output=True, text=True, timeout=GUARD)
    assert admin.returncode == 0, admin.stderr
    run = subprocess.run([python, "-c", DEVICE, server.url, admin.stdout.strip(), str(data),
                          ",".join(SERVER_STACK), str(GUARD)],
                         capture_output=True, text=True, timeout=GUARD, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["trained"] == 1 and report["logits"] == [2, 10]
    assert report["loaded"] == [] and report["importable"] == []
    assert report["pflkit"].startswith(str(venv))  # the wheel, not this source tree
    assert server.status()["status"] == "finished"


def _write_client_data(config: str, folder: Path) -> None:
    federation, _ = build_run(SimConfig.from_toml(config))
    folder.mkdir()
    save_client_data(folder / "data.safetensors", federation.clients[0].train)
