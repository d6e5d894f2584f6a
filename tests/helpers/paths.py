"""Where the repository's pieces are, for tests in any folder of tests/."""
import glob
import os

HELPERS = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HELPERS)
ROOT = os.path.dirname(TESTS)
DATA = os.path.join(TESTS, "data")


def find_test_file(name):
    """tests/<folder>/<name>: the one test file of that name (test file names are unique)."""
    found = glob.glob(os.path.join(TESTS, "*", name))
    assert len(found) == 1, f"{name}: expected one test file, found {found}"
    return found[0]
