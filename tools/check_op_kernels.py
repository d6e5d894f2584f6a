"""Fails the build when a backend lacks a kernel of a catalogue op (run by meson after the
backends' libraries are built; meson.build's op_kernel_check).

usage: check_op_kernels.py CATALOGUE STAMP --nm NM [--host LIB] [--cuda LIB --cpp CC... --cuda-include DIR...
       --cuda-kernels FILE.cu...] [--vulkan LIB]

Every backend built claims every catalogue op (dataflow_register_default_ops registers what
the backend's default ops library exports). For each op and each claiming backend:
  host    the kernel dataflow_host_<op>_<variant> of every variant and the launch function
          dataflow_host_<op>_launch (natives), or dataflow_host_<op> and its init (externals,
          and natives the host implements as externals)
  cuda    by the op's launch class on cuda: dataflow_cuda_<op> and its init (external), or the
          launch function, and the kernel dataflow_cuda_<op>_<variant> of every variant
          defined in backends/cuda/kernels (in the file the backend's source lookup picks,
          cuda_default_ops.c, preprocessed as NVRTC sees it)
  vulkan  the SPIR-V kernel dataflow_vulkan_<op>_<variant> of every variant (from
          shaders/<op>.comp) and the launch function, or the function and its init
          (external class).
Symbols are read with nm from the libraries' dynamic symbol tables. On success STAMP is written.
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_ops  # noqa: E402


def exported(nm, library):
    out = subprocess.run([nm, "-D", "--defined-only", library], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"check_op_kernels: {nm} failed on {library}:\n{out.stderr}")
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def entry_points(symbols, backend, op, external):
    """What is missing of the op's entry points: its init and function (external) or launch."""
    base = f"dataflow_{backend}_{op.name}"
    wanted = [base, base + "_init"] if external else [base + "_launch"]
    return [s for s in wanted if s not in symbols]


def check_host(symbols, op):
    external = op.kind == "external" or f"dataflow_host_{op.name}_launch" not in symbols and \
        f"dataflow_host_{op.name}_init" in symbols
    missing = entry_points(symbols, "host", op, external)
    if not external:
        missing += [s for s in (f"dataflow_host_{op.name}_{op.variant_symbol(v)}" for v in op.variants)
                    if s not in symbols]
    return missing


class CudaSources:
    """backends/cuda/kernels as NVRTC sees them (the C preprocessor with __CUDACC__)."""

    def __init__(self, cpp, includes, files):
        self.cpp, self.includes = cpp, includes
        self.files = {os.path.basename(f): f for f in files}
        self.text = {}

    def source_of(self, op_name):
        """kernels/<p>.cu for the longest prefix p of the name ending at a '_' or its end
        (cuda_default_ops.c's dataflow_cuda_kernel_source)."""
        cuts = [i for i, c in enumerate(op_name) if c == "_"] + [len(op_name)]
        for n in sorted(cuts, reverse=True):
            if op_name[:n] + ".cu" in self.files:
                return op_name[:n] + ".cu"
        return None

    def preprocessed(self, name):
        if name not in self.text:
            cmd = [*self.cpp, "-E", "-P", "-x", "c", "-D__CUDACC__", "-D__CUDA_ARCH__=900",
                   *[f"-I{d}" for d in self.includes], self.files[name]]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"check_op_kernels: preprocessing {self.files[name]} failed:\n{out.stderr}")
            self.text[name] = out.stdout
        return self.text[name]

    def missing_kernels(self, op):
        source = self.source_of(op.name)
        kernels = [f"dataflow_cuda_{op.name}_{op.variant_symbol(v)}" for v in op.variants]
        if source is None:
            return [f"{k} (no kernels/{op.name}.cu or a file of a prefix of the name)" for k in kernels]
        text = self.preprocessed(source)
        return [f"{k} (in kernels/{source})" for k in kernels if not re.search(rf"\b{k}\s*\(", text)]


def check_cuda(symbols, sources, op):
    external = op.kind == "external" or op.launch["cuda"][0] == "external"
    missing = entry_points(symbols, "cuda", op, external)
    if not external:
        missing += sources.missing_kernels(op)
    return missing


def check_vulkan(symbols, op):
    external = op.kind == "external" or op.launch["vulkan"][0] == "external"
    shaders = [f"dataflow_vulkan_{op.name}_{op.variant_symbol(v)}" for v in op.variants]
    return entry_points(symbols, "vulkan", op, external) + \
        [f"{s} (shaders/{op.name}.comp)" for s in shaders if s not in symbols]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("catalogue")
    p.add_argument("stamp")
    p.add_argument("--nm", required=True)
    p.add_argument("--host")
    p.add_argument("--cuda")
    p.add_argument("--cpp", nargs="+", default=[])
    p.add_argument("--cuda-include", nargs="+", default=[])
    p.add_argument("--cuda-kernels", nargs="+", default=[])
    p.add_argument("--vulkan")
    args = p.parse_args()
    try:
        ops, _ = gen_ops.load(args.catalogue)
    except gen_ops.CatalogueError as e:
        sys.exit(f"{args.catalogue}: {e}")
    checks = []
    if args.host:
        host = exported(args.nm, args.host)
        checks.append(("host", args.host, lambda op: check_host(host, op)))
    if args.cuda:
        cuda = exported(args.nm, args.cuda)
        sources = CudaSources(args.cpp, args.cuda_include, args.cuda_kernels)
        checks.append(("cuda", args.cuda, lambda op: check_cuda(cuda, sources, op)))
    if args.vulkan:
        vulkan = exported(args.nm, args.vulkan)
        checks.append(("vulkan", args.vulkan, lambda op: check_vulkan(vulkan, op)))
    errors = [f"  {op.name} on {backend} ({os.path.basename(lib)}): missing {', '.join(missing)}"
              for op in ops for backend, lib, check in checks for missing in [check(op)] if missing]
    if errors:
        sys.exit("check_op_kernels: catalogue ops without their kernels on a backend that claims them "
                 f"({args.catalogue}):\n" + "\n".join(errors))
    with open(args.stamp, "w") as f:
        f.write(f"{len(ops)} ops checked on {', '.join(b for b, _, _ in checks)}\n")


if __name__ == "__main__":
    main()
