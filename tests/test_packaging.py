import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"sdk": "pflkit/sdk", "server": "pflkit/server", "export": "pflkit/export"}


def test_the_wheel_contains_every_module_of_the_source_tree(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "runs", "build", "dist", "*.egg-info", "__pycache__", "android-demo"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        check=True,
    )
    (wheel,) = (tmp_path / "dist").glob("pflkit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"{target}/{path.relative_to(source / folder).as_posix()}"
        for folder, target in PACKAGES.items()
        for path in (source / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert expected, "no modules found in the source tree"
    missing = sorted(expected - names)
    assert not missing, f"modules missing from the wheel: {missing}"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "pfl-sim" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_make_targets_name_no_path_outside_the_checkout():
    """A user's machine has no /work: every make target runs from a fresh clone anywhere."""
    makefile = (ROOT / "Makefile").read_text()
    assert "/work" not in makefile
