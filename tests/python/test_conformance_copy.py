"""tests/conformance/ is the repository's copy of ../shared/conformance (the conformance
programs and torch 2.11's recorded numbers), and labs/anchors/torch211_h200.md of
../shared/anchors/torch211_h200.md, so that a clone without ../shared runs its tests and labs.
Where ../shared exists, each file there must have its copy here, equal byte for byte; the
scripts this repository extends (to run cases_mini.py too) must instead still come from the
shared file as it was when they were extended (its SHA-256 below), so that a change made there
is noticed and carried over. Without ../shared the tests are skipped, with the reason."""
import hashlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"

# shared file -> its copy in the repository
COPIES = {
    "conformance/cases.py": "tests/conformance/cases.py",
    "conformance/expected_torch_2.11.jsonl": "tests/conformance/expected_torch_2.11.jsonl",
    "conformance/runner.py": "tests/conformance/runner.py",
    "conformance/run_mini.py": "tests/conformance/run_mini.py",
    "conformance/run_torch.py": "tests/conformance/run_torch.py",
    "conformance/README.md": "tests/conformance/README.md",
    "anchors/torch211_h200.md": "labs/anchors/torch211_h200.md",
}
# Extended here: the SHA-256 of the shared file each extension was made from.
EXTENDED_FROM = {
    "conformance/runner.py": "e3e59594afbd60ce68cd3bf38d3a4d9b057d27b917bb880d3360677e31076570",
    "conformance/run_mini.py": "a24384baae165587530d6cfa5e6512536dae34837707a08f507b1782a8c007f1",
    "conformance/run_torch.py": "d34d857a3d3ac0c0105669f907bad33371d615a98398d3e8eeddc590016ec830",
    "conformance/README.md": "8e4a8a50cd0c62896aedcfc0e2875a647f814957650e2a23ef7e75d89a3f577c",
}


def need_shared(folder):
    if not (SHARED / folder).is_dir():
        pytest.skip(f"{SHARED / folder} does not exist (a clone without ../shared): "
                    "nothing to compare the repository's copy with")


def test_every_shared_conformance_file_has_its_copy():
    need_shared("conformance")
    shared = {f"conformance/{p.name}" for p in (SHARED / "conformance").iterdir() if p.is_file()}
    missing = sorted(shared - set(COPIES))
    assert not missing, (f"{missing}: in ../shared/conformance but not in tests/conformance/ "
                         "(copy it, and add it to COPIES here)")


@pytest.mark.parametrize("name", sorted(COPIES))
def test_copy_equals_shared(name):
    need_shared(name.split("/")[0])
    shared, copy = SHARED / name, REPO / COPIES[name]
    if not shared.exists():
        pytest.fail(f"{shared} is gone: drop it from COPIES, or restore it")
    assert copy.exists(), f"{COPIES[name]} is missing: copy {shared} there"
    if copy.read_bytes() == shared.read_bytes():
        return
    assert name in EXTENDED_FROM, (f"{COPIES[name]} differs from {shared}: copy it again "
                                   "(the repository keeps it unchanged)")
    digest = hashlib.sha256(shared.read_bytes()).hexdigest()
    assert digest == EXTENDED_FROM[name], (
        f"{shared} changed since {COPIES[name]} was extended from it: carry the change "
        f"over into {COPIES[name]}, then set EXTENDED_FROM[{name!r}] to {digest}")
