"""The public signatures of Kotlin sources, one line each, to hold compile-check stubs to them.

The app is compiled on the host against stubs of ExecuTorch's Android API (kotlin-stubs/), which
cannot be its real sources (they need fbjni and a native library). A stub that invents a method
would let the app compile here and fail against the real AAR, so check.sh runs ``check``: every
declaration the stubs make must appear, word for word after normalizing, in
``executorch-api.txt``, which ``extract`` writes from ExecuTorch's own sources of the pinned
release (signatures only, no bodies).

    python kotlin_api.py extract GIT_DIR REV OUT       # from a clone of pytorch/executorch
    python kotlin_api.py check API_FILE STUB.kt...     # exit 1 naming each unknown declaration

A line is ``scope: declaration``: the scope is the package or the enclosing class (its
companion object is ``Class.Companion``); the declaration keeps the kind, name, parameter
names, types and defaults, and the return or property type. Annotations, bodies and
``open``/``override``/``external`` are dropped; non-public members and constructors are
skipped. Enough Kotlin for ktfmt-formatted sources, not a full parser.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# The ExecuTorch sources the app's stubs cover (extension/android in pytorch/executorch).
SOURCES = [f"extension/android/executorch_android/src/main/java/org/pytorch/executorch/{name}"
           for name in ("EValue.kt", "Module.kt", "Tensor.kt", "training/SGD.kt",
                        "training/TrainingModule.kt")]

_HIDDEN = {"private", "internal", "protected"}
_KEPT = {"abstract", "open", "sealed", "data", "enum", "annotation", "inner", "const",
         "lateinit", "suspend", "inline", "operator", "infix", "fun"}
_MODIFIER = (r"(?:public|private|internal|protected|open|override|abstract|final|const|"
             r"external|inline|operator|infix|suspend|data|sealed|enum|inner|lateinit|"
             r"annotation|companion|fun(?=\s+interface))")
_ANNOTATION = r"@[\w.]+(?::\w+)?(?:\([^()]*\))?"
_DECLARATION = re.compile(
    rf"[ \t]*(?P<mods>(?:(?:{_ANNOTATION}|{_MODIFIER})\s+)*)"
    r"(?P<kind>fun|val|var|class|interface|object|constructor|init)\b")
_ANNOTATIONS = re.compile(rf"{_ANNOTATION}\s*")


def strip_comments_and_strings(src: str) -> str:
    """The source with comments removed and string/char literals emptied (braces stay balanced)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"""(?:.|\n)*?"""|"(?:\\.|[^"\\\n])*"|'
                         r"'(?:\\.|[^'\\\n])+'", re.S)
    return pattern.sub(lambda m: "" if m[0][0] == "/" else m[0][0] * 2, src)


def _close(text: str, start: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes ``text[start]`` (an ``open_``)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced {open_} at offset {start}")


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets; empty parts (trailing commas) dropped."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "(<[{"
        depth -= ch in ")>]}"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _type(text: str) -> str:
    """A type or default expression with canonical spacing."""
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s*([<>(),?])\s*", r"\1", text)
    return text.replace(",", ", ").replace("->", " -> ")


def _params(text: str) -> tuple[list[str], list[str]]:
    """Normalized parameters, and the ``val``/``var`` ones as property declarations."""
    params, properties = [], []
    for part in _split_top(text):
        mods = set()
        part = _ANNOTATIONS.sub("", part)
        while m := re.match(r"(vararg|private|internal|protected|public|override|open|val|var)"
                            r"\s+", part):
            mods.add(m[1])
            part = part[m.end():]
        name, _, rest = part.partition(":")
        declared, eq, default = rest.partition("=")
        param = f"{name.strip()}: {_type(declared)}" + (f" = {_type(default)}" if eq else "")
        params.append(("vararg " if "vararg" in mods else "") + param)
        kind = "var" if "var" in mods else "val" if "val" in mods else None
        if kind and not mods & _HIDDEN:
            properties.append(f"{kind} {name.strip()}: {_type(declared)}")
    return params, properties


def _signature_end(text: str, pos: int) -> int:
    """End of a ``: Type`` after ``pos``: the first ``{``, ``=`` or newline outside ``<>()``."""
    depth = 0
    for i in range(pos, len(text)):
        ch = text[i]
        depth += ch in "<("
        depth -= ch in ">)" and not (ch == ">" and text[i - 1] == "-")
        if depth == 0 and (ch in "{=\n" or text.startswith(" by ", i)):
            return i
    return len(text)


def _class_header(header: str, mods: set[str], kind: str) -> tuple[str, list[str]]:
    """``[mods] class Name : Supers`` and the public constructor / property declarations."""
    m = re.match(r"\s*(\w+)\s*(<[^{(:]*>)?", header)
    if m is None:
        raise ValueError(f"cannot read class header {header!r}")
    name, rest = m[1] + (_type(m[2]) if m[2] else ""), _ANNOTATIONS.sub("", header[m.end():])
    members: list[str] = []
    ctor = re.match(r"\s*((?:\w+\s+)*?)(?:constructor\s*)?(?=\()", rest)
    if ctor is not None:
        end = _close(rest, ctor.end(), "(", ")")
        params, properties = _params(rest[ctor.end() + 1:end - 1])
        if not set(ctor[1].split()) & _HIDDEN:
            members.append(f"constructor({', '.join(params)})")
        members += properties
        rest = rest[end:]
    elif kind == "class" and not mods & {"abstract", "sealed", "enum"}:
        members.append("constructor()")
    supers = [re.sub(r"\(.*\)$", "", s) for s in _split_top(rest.strip().removeprefix(":"))]
    prefix = " ".join(sorted(mods & _KEPT - {"const"}) + [kind])
    return f"{prefix} {name}" + (f" : {', '.join(supers)}" if supers else ""), members


def _members(text: str, scope: str, out: list[str]) -> None:
    """Append the public declarations of one body (a file or a class body without braces)."""
    starts, depth, line_start, in_header = [], 0, True, False
    for i, ch in enumerate(text):
        if line_start and depth == 0 and (m := _DECLARATION.match(text, i)):
            # a class's primary constructor may start a line of its header
            if (not starts or i >= starts[-1][1]) and not (in_header
                                                            and m["kind"] == "constructor"):
                starts.append((i, m.end(), m))
                in_header = m["kind"] in ("class", "interface", "object")
        in_header &= not (ch == "{" and depth == 0)
        line_start = ch == "\n" or (line_start and ch in " \t")
        depth += ch in "({["
        depth -= ch in ")}]"
    for index, (_, end, m) in enumerate(starts):
        limit = starts[index + 1][0] if index + 1 < len(starts) else len(text)
        mods = set(re.findall(r"\b\w+\b", _ANNOTATIONS.sub("", m["mods"])))
        kind = m["kind"]
        if kind == "init" or mods & _HIDDEN:
            continue
        chunk = text[end:limit]
        if kind in ("class", "interface", "object"):
            brace = _find_body(chunk)
            body = chunk[brace + 1:_close(chunk, brace, "{", "}") - 1] if brace >= 0 else ""
            header = chunk[:brace] if brace >= 0 else chunk
            if "companion" in mods:
                name = header.strip() or "Companion"
                _members(body, f"{scope}.{name}", out)
                continue
            declaration, extra = _class_header(header, mods, kind)
            name = declaration.split(" : ")[0].split()[-1].split("<")[0]
            out.append(f"{scope}: {declaration}")
            out.extend(f"{scope}.{name}: {e}" for e in extra)
            _members(body, f"{scope}.{name}", out)
        elif kind == "constructor":
            paren = chunk.index("(")
            params = _params(chunk[paren + 1:_close(chunk, paren, "(", ")") - 1])[0]
            out.append(f"{scope}: constructor({', '.join(params)})")
        elif kind == "fun":
            paren = chunk.index("(")
            name = re.sub(r"\s+", "", chunk[:paren])
            close = _close(chunk, paren, "(", ")")
            params = _params(chunk[paren + 1:close - 1])[0]
            stop = _signature_end(chunk, close)
            tail = chunk[close:stop].strip()
            returns = _type(tail.removeprefix(":")) if tail.startswith(":") else "Unit"
            if not tail and chunk[stop:stop + 1] == "=":  # the type is the expression's
                returns = "Unit" if chunk[stop + 1:].split("\n")[0].strip() == "Unit" else "?"
            prefix = " ".join(sorted(mods & _KEPT) + ["fun"])
            out.append(f"{scope}: {prefix} {name}({', '.join(params)}): {returns}")
        else:  # val / var
            stop = _signature_end(chunk, 0)
            name, _, declared = chunk[:stop].partition(":")
            value = ""
            if "const" in mods and chunk[stop:stop + 1] == "=":
                value = " = " + _type(chunk[stop + 1:].split("\n")[0])
            prefix = " ".join(sorted(mods & _KEPT) + [kind])
            typed = f": {_type(declared)}" if declared.strip() else ""
            out.append(f"{scope}: {prefix} {name.strip()}{typed}{value}")


def _find_body(chunk: str) -> int:
    """Index of the ``{`` opening a class body in a class chunk (-1: no body)."""
    depth = 0
    for i, ch in enumerate(chunk):
        if ch == "{" and depth == 0:
            return i
        depth += ch in "(<"
        depth -= ch in ")>"
    return -1


def declarations(src: str) -> list[str]:
    """The public declarations of one Kotlin file, as ``scope: declaration`` lines."""
    text = strip_comments_and_strings(src)
    package = re.search(r"^\s*package\s+([\w.]+)", text, re.M)
    body = re.sub(r"^\s*(?:@file:.*|package .*|import .*)$", "", text, flags=re.M)
    out: list[str] = []
    _members(body, package[1] if package else "", out)
    return out


def extract(git_dir: str, rev: str, out: Path) -> None:
    """Write the signature list of :data:`SOURCES` at ``rev`` of an ExecuTorch clone."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", git_dir, *args], check=True, capture_output=True,
                              text=True).stdout

    commit = git("rev-parse", f"{rev}^{{commit}}").strip()
    version = git("show", f"{commit}:version.txt").strip()
    lines = [f"# ExecuTorch's Android API, signatures only: pytorch/executorch {commit}",
             f"# ({rev}, version.txt {version}), written by kotlin_api.py extract; do not edit."]
    for path in SOURCES:
        lines += sorted(declarations(git("show", f"{commit}:{path}")))
    out.write_text("\n".join(lines) + "\n")


def check(api: Path, stubs: list[Path]) -> list[str]:
    """The stub declarations that the signature list does not have."""
    known = {line for line in api.read_text().splitlines() if not line.startswith("#")}
    return [f"{stub.name}: {line}" for stub in stubs for line in declarations(stub.read_text())
            if line not in known]


def main() -> None:
    """Dispatch ``extract`` / ``check``."""
    args = sys.argv[1:]
    if len(args) == 4 and args[0] == "extract":
        extract(args[1], args[2], Path(args[3]))
    elif len(args) >= 3 and args[0] == "check":
        unknown = check(Path(args[1]), [Path(a) for a in args[2:]])
        if unknown:
            sys.exit(f"stub declarations not in {Path(args[1]).name} (ExecuTorch's real API):\n  "
                     + "\n  ".join(unknown))
    else:
        sys.exit("usage: kotlin_api.py extract GIT_DIR REV OUT | check API_FILE STUB.kt...")


if __name__ == "__main__":
    main()
