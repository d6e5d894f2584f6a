"""The C libraries see only the layers below them (docs/ARCHITECTURE.md): their meson
dependencies and their #includes name no library above, nor libdataflowcomm where the layer
does not use collectives (the models: data-parallel sums and ZeRO-1 are the executor's)."""
import glob
import os
import re

import pytest

from paths import ROOT

# library folder -> the libraries' dependency and header names it must not reach
FORBIDDEN = {
    "libdataflow": ("dataflowops", "dataflowmodels", "dataflowring", "dataflowcomm"),
    "libdataflowops": ("dataflowmodels", "dataflowring", "dataflowcomm"),
    "libdataflowmodels": ("dataflowring", "dataflowcomm"),
}
GENERATED = {"dataflowops": {"default_ops.h", "op_args.h"}}  # written at build time from the catalogue


def public_headers(lib):
    """The headers library `lib` (e.g. dataflowcomm) installs as dataflow/<name>."""
    names = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, f"lib{lib}", "include", "dataflow", "*.h"))}
    assert names, f"lib{lib} has no public headers"
    return names | GENERATED.get(lib, set())


def dependency_names(meson_build):
    """The names in its `dependencies : [...]` lists (e.g. dataflowops_dep -> dataflowops)."""
    with open(meson_build) as f:
        text = f.read()
    return {name[:-len("_dep")] for deps in re.findall(r"dependencies\s*:\s*\[([^\]]*)\]", text)
            for name in re.findall(r"\w+_dep\b", deps)}


def included_headers(folder):
    """{(file, header)} of every `#include "dataflow/<header>"` in the folder's C sources and headers."""
    found = set()
    for path in glob.glob(os.path.join(folder, "**", "*.[ch]"), recursive=True):
        with open(path) as f:
            found |= {(os.path.relpath(path, ROOT), h) for h in re.findall(r'#include\s+"dataflow/([\w/]+\.h)"', f.read())}
    return found


def test_dependency_names_reads_meson_lists(tmp_path):
    build = tmp_path / "meson.build"
    build.write_text("lib = library('x', dependencies : [dataflowops_dep, m])\n"
                     "dep = declare_dependency(dependencies : [dataflowcomm_dep])\n")
    assert dependency_names(build) == {"dataflowops", "dataflowcomm"}


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_a_library_links_no_layer_above_it(folder):
    names = dependency_names(os.path.join(ROOT, folder, "meson.build"))
    assert not names & set(FORBIDDEN[folder]), f"{folder}/meson.build depends on {sorted(names & set(FORBIDDEN[folder]))}"


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_a_library_includes_no_header_of_a_layer_above_it(folder):
    forbidden = set().union(*(public_headers(lib) for lib in FORBIDDEN[folder]))
    bad = sorted((f, h) for f, h in included_headers(os.path.join(ROOT, folder)) if h in forbidden)
    assert not bad, f"{folder} includes headers of layers above it: {bad}"
