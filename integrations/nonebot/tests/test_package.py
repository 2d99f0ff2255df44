"""The wheel (``pip wheel``, as ``scripts/package.sh`` builds it) and the sdist hold what they
should: every module of the plugin and ``py.typed``; the Chinese README as the long description
(``readme = "README.md"``), the links and the authors; the English README in the sdist. Built
offline with the pinned hatchling (``--no-build-isolation``)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
MODULE = "nonebot_plugin_auto_assign"


def run(*args: str, cwd: Path = PACKAGE) -> None:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_wheel(tmp_path: Path) -> None:
    run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "--disable-pip-version-check", "--quiet", "--wheel-dir", str(tmp_path), str(PACKAGE),
    )  # fmt: skip
    [wheel] = tmp_path.glob(f"{MODULE}-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(z.read(metadata_name).decode())
    modules = {f"{MODULE}/{p.name}" for p in (PACKAGE / "src" / MODULE).glob("*.py")}
    assert {f"{MODULE}/commands.py", f"{MODULE}/i18n.py", f"{MODULE}/__init__.py"} <= modules
    assert modules | {f"{MODULE}/py.typed"} <= names
    assert not [n for n in names if n.startswith("tests/") or "README" in n]
    assert metadata["Name"] == "nonebot-plugin-auto-assign"
    assert metadata["Author"] == "auto-assign maintainers"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().strip() == (PACKAGE / "README.md").read_text().strip()
    assert sorted(metadata.get_all("Project-URL") or []) == [
        "Homepage, https://github.com/auto-assign/auto-assign/tree/main/integrations/nonebot",
        "Issues, https://github.com/auto-assign/auto-assign/issues",
        "Repository, https://github.com/auto-assign/auto-assign",
    ]


def test_sdist(tmp_path: Path) -> None:
    run(sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(tmp_path))
    [sdist] = tmp_path.glob("nonebot_plugin_auto_assign-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    need = {
        "README.md",
        "README.en.md",
        "pyproject.toml",
        "requirements-test.txt",
        "run-tests.sh",
        f"src/{MODULE}/commands.py",
        f"src/{MODULE}/i18n.py",
        f"src/{MODULE}/py.typed",
        "tests/conftest.py",
        "tests/test_commands.py",
    }
    assert need <= names, need - names
    assert not [n for n in names if n.startswith(".venv") or "__pycache__" in n]
