"""A non-editable install holds the whole product: every app, its templates, static
files and suites, so that Django's checks pass and pages render from site-packages.

``pip install .`` is run for real (no index, no build isolation, no dependencies:
nothing is downloaded; the dependencies are this environment's), into a folder of
its own, and the product is then loaded from there alone, from a directory outside
the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Loaded from the installed copy: Django's system checks on the product's own
#: settings, then a page's template and a script found, and a suite read.
PROBE = """
import sys
from pathlib import Path
import django
from django.core.management import call_command
django.setup()
import reach_site
from django.contrib.staticfiles import finders
from django.template.loader import get_template
from evals.suites import builtin_paths
target = Path(sys.argv[1]).resolve()
assert Path(reach_site.__file__).resolve().is_relative_to(target), reach_site.__file__
call_command("check", fail_level="ERROR")
get_template("runs/_step.html")
assert finders.find("js/chat.js"), "static/js/chat.js is not installed"
suites = builtin_paths()
assert "notes-local" in suites, sorted(suites)
assert Path(suites["notes-local"]).resolve().is_relative_to(target)
print("installed product checked")
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site-packages")
    build = tmp_path_factory.mktemp("build")
    # setuptools builds in the source tree (build/, *.egg-info): a copy of what a
    # clone holds keeps the checkout clean.
    source = build / "source"
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        cwd=build,
        env={**os.environ, "PIP_NO_CACHE_DIR": "1", "TMPDIR": str(build)},
        timeout=240,
    )
    return target


def test_every_package_of_the_checkout_is_installed(installed: Path) -> None:
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    # Each top-level package of the checkout (a folder with an __init__.py) that
    # the product imports, installed; and no top-level name left out of the list.
    packages = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if path.parent.name not in {"tests", "bench"}
    }
    assert packages, "no package found in the checkout"
    missing = sorted(name for name in packages if not (installed / name).is_dir())
    assert not missing, f"not installed by `pip install .`: {missing}"
    include = found["packages"]["find"]["include"]
    assert {name + "*" for name in packages} <= set(include)


def test_the_installed_product_passes_its_checks_outside_the_checkout(
    installed: Path, tmp_path: Path
) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REACH_", "DATABASE_URL", "PYTHON"))
    }
    env.update(
        PYTHONPATH=str(installed),
        DJANGO_SETTINGS_MODULE="reach_site.settings",
        REACH_VAR_DIR=str(tmp_path / "var"),
    )
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(installed)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "installed product checked" in result.stdout
