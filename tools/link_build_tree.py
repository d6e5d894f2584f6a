"""Links the built libraries side by side into the top build directory (run by meson).

The build tree keeps each library in its folder's build directory, while at run time they sit
side by side, as installed (libdataflow loads a backend from its own directory). These links
let DATAFLOW_LIB_DIR=<build dir> run the Python package from a build tree.

usage: link_build_tree.py OUTPUT_DIR LIBRARY...
"""
import os
import sys


def main():
    out_dir, libraries = sys.argv[1], sys.argv[2:]
    for path in libraries:
        link = os.path.join(out_dir, os.path.basename(path))
        target = os.path.relpath(path, out_dir)
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link)


if __name__ == "__main__":
    main()
