"""Map the product's top-level folders to the import packages pflkit.sdk/.server/.export.

Every folder with an ``__init__.py`` under sdk/, server/ and export/ becomes a package, so a
new sub-package can never be left out of the wheel (tests/test_packaging.py checks the wheel).
"""

from pathlib import Path

from setuptools import setup

ROOTS = {"sdk": "pflkit.sdk", "server": "pflkit.server", "export": "pflkit.export"}

packages, package_dir = [], {}
for folder, name in ROOTS.items():
    for init in sorted(Path(folder).rglob("__init__.py")):
        rel = init.parent.relative_to(folder).parts
        packages.append(".".join((name, *rel)))
        package_dir[".".join((name, *rel))] = init.parent.as_posix()

setup(packages=packages, package_dir=package_dir)
