"""Prints where pip's oneDNN wheels put oneDNN (include directory, library directory, version), one
per line, for meson: onednn-devel-cpu-gomp holds the headers, onednn-cpu-gomp the library. Exits 1
when they are not installed in the Python environment meson runs in (pip install . installs them
into its build environment from pyproject.toml's build requirements)."""
import os
import sys
from importlib import metadata


def located(distribution, suffix):
    """Absolute path of the distribution's file whose path ends with suffix, or None."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if str(f).replace("\\", "/").endswith(suffix):
            path = os.path.realpath(dist.locate_file(f))
            if os.path.exists(path):
                return path
    return None


def main():
    header = located("onednn-devel-cpu-gomp", "include/oneapi/dnnl/dnnl.h")
    library = located("onednn-cpu-gomp", "/libdnnl.so")
    if not header or not library:
        return 1
    include_dir = os.path.dirname(os.path.dirname(os.path.dirname(header)))
    version = metadata.version("onednn-cpu-gomp")
    print(include_dir, os.path.dirname(library), version, sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
