"""Writes the embedded training corpus, python/dataflow/data/corpus.txt: the docstrings of a fixed
list of Python standard-library modules (English prose about programming, present on every Python
install, under the PSF License, which python/dataflow/data/LICENSE-PSF.txt reproduces).

usage: python tools/make_corpus.py [OUTPUT]   (the committed file was made with CPython 3.11.7)
"""
import importlib
import inspect
import os
import sys

MODULES = [
    "abc", "argparse", "ast", "asyncio", "base64", "bisect", "calendar", "cmd", "codecs", "collections",
    "concurrent.futures", "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "doctest", "email.message", "enum", "fileinput", "fnmatch", "fractions", "ftplib", "functools",
    "getopt", "gettext", "glob", "gzip", "hashlib", "heapq", "hmac", "html.parser", "http.client",
    "http.server", "imaplib", "inspect", "io", "ipaddress", "itertools", "json", "locale", "logging",
    "mailbox", "mimetypes", "multiprocessing.pool", "numbers", "operator", "optparse", "os", "pathlib",
    "pdb", "pickle", "pkgutil", "platform", "poplib", "pprint", "queue", "random", "re", "sched",
    "secrets", "selectors", "shelve", "shlex", "shutil", "smtplib", "socket", "socketserver", "sqlite3",
    "statistics", "string", "struct", "subprocess", "tarfile", "tempfile", "textwrap", "threading",
    "timeit", "tokenize", "trace", "traceback", "types", "typing", "unittest", "urllib.parse",
    "urllib.request", "uuid", "warnings", "weakref", "xml.dom.minidom", "zipfile",
]
LIMIT_BYTES = 600_000


def docstrings(module):
    """(title, text) of the module and of its public classes, functions and methods, in source order."""
    yield module.__name__, inspect.getdoc(module)
    members = [(n, m) for n, m in vars(module).items() if not n.startswith("_")
               and (inspect.isclass(m) or inspect.isfunction(m)) and getattr(m, "__module__", None) == module.__name__]
    for name, member in members:
        yield f"{module.__name__}.{name}", inspect.getdoc(member)
        if inspect.isclass(member):
            for attr, method in vars(member).items():
                if not attr.startswith("_") and inspect.isfunction(method):
                    yield f"{module.__name__}.{name}.{attr}", inspect.getdoc(method)


def main():
    output = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "python", "dataflow", "data", "corpus.txt")
    seen, parts, size = set(), [], 0
    for module_name in MODULES:
        for title, text in docstrings(importlib.import_module(module_name)):
            if not text or len(text) < 80 or text in seen:  # one-liners teach little; inherited docs repeat
                continue
            seen.add(text)
            part = f"{title}\n\n{text.strip()}\n\n"
            if size + len(part.encode()) > LIMIT_BYTES:
                break
            parts.append(part)
            size += len(part.encode())
    with open(output, "w", encoding="utf-8") as f:
        f.write("".join(parts))
    print(f"{output}: {size} bytes from {len(parts)} docstrings")


if __name__ == "__main__":
    main()
