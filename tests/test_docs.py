"""Documented flows are tested flows: every example of README.md and docs/*.md runs here.

tests/docs_examples.py runs one doc's fenced blocks in order in a fresh folder (conventions in
its docstring and in docs/contributing.md); this file runs it for every doc and checks the
conventions themselves on small docs written here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from docs_examples import REPO, DocError, console_script, parse  # noqa: E402

RUNNER = Path(__file__).parent / "docs_examples.py"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def run_runner(doc: Path, workdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUNNER), str(doc), str(workdir)],
                          capture_output=True, text=True)


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_example_of_the_doc_runs(doc, tmp_path):
    done = run_runner(doc, tmp_path / "work")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"


def write_doc(tmp_path: Path, text: str) -> Path:
    doc = tmp_path / "doc.md"
    doc.write_text(text)
    return doc


def test_blocks_run_in_order_in_one_folder_and_python_sees_the_files(tmp_path):
    doc = write_doc(tmp_path, (
        "Make a file:\n\n```bash\nmkdir -p runs/x && echo 41 > runs/x/n\n```\n\n"
        "Read it:\n\n```python\nfrom pathlib import Path\n"
        "n = int(Path('runs/x/n').read_text())\nPath('runs/x/m').write_text(str(n + 1))\n```\n\n"
        "```console\n$ test \"$(cat runs/x/m)\" = 42 && \\\n  echo fine\nfine\n```\n"))
    done = run_runner(doc, tmp_path / "work")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "work" / "runs" / "x" / "m").read_text() == "42"


def test_a_cd_holds_for_the_next_blocks_like_in_a_terminal(tmp_path):
    doc = write_doc(tmp_path, ("```bash\nmkdir -p project && cd project\necho x > here\n```\n\n"
                               "```python\nfrom pathlib import Path\n"
                               "assert Path('here').read_text() == 'x\\n'\n```\n\n"
                               "```bash\ntest -f here\n```\n"))
    done = run_runner(doc, tmp_path / "work")
    assert done.returncode == 0, done.stderr


def test_a_failing_example_fails_with_its_line_and_output(tmp_path):
    doc = write_doc(tmp_path, "Intro.\n\n```sh\necho before\nfalse\necho after\n```\n")
    done = run_runner(doc, tmp_path / "work")
    assert done.returncode == 1
    assert "doc.md:3: exit status 1" in done.stderr and "before" in done.stderr
    assert "after" not in done.stderr.split("--- stdout ---")[1]


def test_a_python_example_that_raises_fails(tmp_path):
    doc = write_doc(tmp_path, "```python\nimport json\njson.loads('{')\n```\n")
    done = run_runner(doc, tmp_path / "work")
    assert done.returncode == 1 and "JSONDecodeError" in done.stderr


def test_an_opted_out_block_is_skipped_and_says_why(tmp_path):
    doc = write_doc(tmp_path, ("*Not run by `make test`: needs an Android phone.*\n\n"
                               "```sh\nadb devices\n```\n"))
    done = run_runner(doc, tmp_path / "work")
    assert done.returncode == 0, done.stderr
    assert "not run (needs an Android phone.)" in done.stdout


@pytest.mark.parametrize("text, message", [
    ("*Not run by `make test`: slow*\n```sh\nfalse\n```\n", "say in a few words why"),
    ("<!-- not run: too slow for the suite -->\n```sh\nfalse\n```\n", "malformed marker"),
    ("*Not run by make test: needs a GPU here*\n```sh\nfalse\n```\n", "malformed marker"),
    ("*Not run by `make test`: only for shells here*\n```toml\na = 1\n```\n",
     "only applies to"),
    ("```\npfl-sim --config x.toml\n```\n", "unlabelled block holds commands"),
    ("```sh\nfalse\n", "never closed"),
    ("Text.\n\n    pfl-sim --config x.toml\n", "indented code block holds a command"),
])
def test_malformed_markers_and_blocks_are_refused(tmp_path, text, message):
    with pytest.raises(DocError, match=message):
        parse(write_doc(tmp_path, text))


def test_toml_blocks_parse_named_ones_are_written_and_excerpts_must_agree(tmp_path):
    doc = write_doc(tmp_path, ("```toml\n# run.toml\nrounds = 2\n```\n\n"
                               "```bash\ngrep -q 'rounds = 2' run.toml\n```\n"))
    assert run_runner(doc, tmp_path / "a").returncode == 0
    bad = write_doc(tmp_path, "```toml\n# docs/configs/demo.toml (excerpt)\nrounds = 9999\n```\n")
    done = run_runner(bad, tmp_path / "b")
    assert done.returncode == 1 and "rounds = 9999 here but" in done.stderr
    broken = write_doc(tmp_path, "```json\n{\"a\": }\n```\n")
    done = run_runner(broken, tmp_path / "c")
    assert done.returncode == 1 and "doc.md:1:" in done.stderr


def test_console_blocks_run_only_the_prompted_lines():
    text = "$ echo a \\\n    b\na b\n$ ls\nsome output $ not a command\n"
    assert console_script(text) == "echo a \\\n    b\nls\n"


def test_every_doc_follows_the_conventions():
    for doc in DOCS:
        parse(doc)  # raises DocError naming the file and line
