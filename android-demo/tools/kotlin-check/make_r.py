"""Write the app's ``R.java`` from its resources, as the Android build would (ids only).

The Kotlin compile check (check.sh) needs ``R.layout``, ``R.id`` and ``R.string``; generating
them from ``res/`` also checks that every ``@string/...`` and ``@id/...`` a layout uses exists.

    python make_r.py RES_DIR OUT_FILE
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ANDROID = "{http://schemas.android.com/apk/res/android}"


def resources(res: Path) -> dict[str, set[str]]:
    """Resource names by type; exits naming a layout that refers to a missing one."""
    found: dict[str, set[str]] = {"layout": set(), "id": set(), "string": set(), "style": set()}
    for values in sorted(res.glob("values/*.xml")):
        for item in ET.parse(values).getroot():
            if item.tag in found:
                found[item.tag].add(item.attrib["name"].replace(".", "_"))
    references: list[tuple[Path, str, str]] = []
    for layout in sorted(res.glob("layout/*.xml")):
        found["layout"].add(layout.stem)
        for element in ET.parse(layout).iter():
            for value in element.attrib.values():
                if m := re.fullmatch(r"@\+id/(\w+)", value):
                    found["id"].add(m[1])
                elif m := re.fullmatch(r"@(id|string)/(\w+)", value):
                    references.append((layout, m[1], m[2]))
    missing = [f"{path.name}: @{kind}/{name}" for path, kind, name in references
               if name not in found[kind]]
    if missing:
        sys.exit("unknown resources: " + ", ".join(missing))
    return found


def main() -> None:
    """Parse the arguments and write R.java."""
    res, out = Path(sys.argv[1]), Path(sys.argv[2])
    lines = ["package org.pflkit.demo;", "public final class R {"]
    number = 0x7F000000
    for kind, names in sorted(resources(res).items()):
        lines.append(f"  public static final class {kind} {{")
        for name in sorted(names):
            number += 1
            lines.append(f"    public static final int {name} = {number};")
        lines.append("  }")
    lines.append("}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
