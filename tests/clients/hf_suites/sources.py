"""Assembles the test trees the runner runs, under build/hf_suites/<package>-<version>/.

Each tree is the tests/ folder of the *installed* version's sdist, downloaded from PyPI with pip (the one registry CI
reaches), plus the model test files of this folder (transformers_models/, diffusers_models/) in upstream's layout:
tests/models/<arch>/test_modeling_<arch>.py for transformers, tests/models/test_models_<name>.py for diffusers
(helpers, named _*.py, beside them).
transformers' sdist ships test_modeling_common.py, whose ModelTesterMixin is what every upstream model test runs, but
not the two modules it imports from sub-folders; stand-ins for those are written here (see STAND_INS).
"""

import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
BUILD = REPO / "build" / "hf_suites"
PACKAGES = ("transformers", "diffusers")

# transformers' test_modeling_common.py imports these from tests/exporters and tests/generation, which the sdist
# leaves out: so the trees run ModelTesterMixin without its torch.export and generate() tests (the Trainer and
# generate() on npu are covered by tests/test_hf_clients.py).
STAND_INS = {
    "transformers": {
        "exporters/test_export.py": "class ExportTesterMixin:\n    pass\n",
        "generation/test_utils.py": "class GenerationTesterMixin:\n    pass\n",
    },
}


def tree(package: str) -> Path:
    """The assembled tree of `package` at its installed version (downloaded and assembled on first use)."""
    version = importlib.metadata.version(package)
    root = BUILD / f"{package}-{version}"
    sdist_tests = root / "sdist-tests"
    if not sdist_tests.is_dir():
        _download(package, version, root)
    tests = root / "tests"
    shutil.rmtree(tests, ignore_errors=True)
    shutil.copytree(sdist_tests, tests)
    for relative, text in STAND_INS.get(package, {}).items():
        (tests / relative).parent.mkdir(parents=True, exist_ok=True)
        (tests / relative).write_text(text)
    for source in sorted((HERE / f"{package}_models").glob("*.py")):
        if source.name.startswith("_"):  # a helper the model files import
            target = tests / "models" / source.name
        elif package == "transformers":
            target = tests / "models" / source.stem / f"test_modeling_{source.stem}.py"
        else:
            target = tests / "models" / f"test_models_{source.stem}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    # Packages, so the model files' relative imports (`from ...test_modeling_common import`) resolve as upstream.
    for folder in [tests, *[p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"]]:
        (folder / "__init__.py").touch()
    return root


def _download(package: str, version: str, root: Path) -> None:
    download = root / "download"
    shutil.rmtree(download, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    "--dest", str(download), f"{package}=={version}"], check=True)
    (archive,) = download.glob("*.tar.gz")
    prefix = f"{archive.name.removesuffix('.tar.gz')}/tests/"
    extracted = root / "sdist-tests.partial"
    shutil.rmtree(extracted, ignore_errors=True)
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        if not members:
            raise RuntimeError(f"{archive.name} has no tests/ folder")
        for member in members:
            member.name = member.name.removeprefix(prefix)
            tar.extract(member, extracted, filter="data")
    extracted.rename(root / "sdist-tests")
    shutil.rmtree(download)


if __name__ == "__main__":
    for name in sys.argv[1:] or PACKAGES:
        print(tree(name))
