"""The catalogue's launch classes (tools/gen_ops.py: the standard launch functions it generates
for cuda and vulkan) and the build's kernel check (tools/check_op_kernels.py): every native op
has a class per backend; a class a backend has no form of, or a parameter that is no argument,
fails naming the op; the check passes on the build and fails naming an op whose kernels a
backend lacks."""
import glob
import os
import shutil
import subprocess
import sys

import pytest
from dataflow._ffi import LIB_DIR
from paths import ROOT

TOOLS = os.path.join(ROOT, "tools")
sys.path.insert(0, TOOLS)
import gen_ops  # noqa: E402

CATALOGUE = os.path.join(ROOT, "libdataflowops", "catalogue.toml")
GENERATED = os.path.join(LIB_DIR, "libdataflowops", "include", "dataflow")


def catalogue_text():
    with open(CATALOGUE) as f:
        return f.read()


def load_text(tmp_path, text):
    path = tmp_path / "catalogue.toml"
    path.write_text(text)
    return gen_ops.load(str(path))[0]


def test_every_native_op_has_a_class_per_backend():
    ops, _ = gen_ops.load(CATALOGUE)
    for op in ops:
        assert set(op.launch) == (set() if op.kind == "external" else {"cuda", "vulkan"}), op.name


def test_standard_classes_become_launch_lines_and_the_others_do_not():
    ops, _ = gen_ops.load(CATALOGUE)
    cuda, vulkan = gen_ops.gen_launches(ops, "cuda"), gen_ops.gen_launches(ops, "vulkan")
    assert 'CUDA_ELEMENTWISE(add, Dataflow_Add_Args, a.n, "n")' in cuda.splitlines()
    assert ('CUDA_ROWS(cross_entropy, Dataflow_Cross_Entropy_Args, a.tokens, a.vocab, '
            'DATAFLOW_CROSS_ENTROPY_ARG_LOGITS, "tokens", "vocab")') in cuda.splitlines()
    assert ('CUDA_ELEMENTWISE(grad_norm_sq_partials, Dataflow_Grad_Norm_Sq_Partials_Args, '
            '(a.n + DATAFLOW_GRAD_NORM_BLOCK - 1) / DATAFLOW_GRAD_NORM_BLOCK * 16, '
            '"(n + GRAD_NORM_BLOCK - 1) / GRAD_NORM_BLOCK * 16")') in cuda.splitlines()
    assert ('VULKAN_ELEMENTWISE(swiglu, Dataflow_Swiglu_Args, a.rows * a.ffn, "rows * ffn")'
            in vulkan.splitlines())
    # custom (qmatmul), external on the backend (adamw_step on vulkan, attention on cuda), external ops
    for text, absent in ((cuda, ("qmatmul_int8", "attention,", "matmul")),
                         (vulkan, ("qmatmul_int8", "adamw_step", "cross_entropy", "matmul"))):
        for name in absent:
            assert f"({name}" not in text and f"({name}," not in text, name


ADD_LAUNCH = 'launch = "elementwise(n)"'


@pytest.mark.parametrize("replacement, match", [
    ('launch = "stripes(n)"', r"add: launch: cuda: 'stripes\(n\)' is none of"),
    ('launch = "elementwise(m)"', "add: launch: m is neither a scalar argument nor a constant"),
    ('launch = "elementwise(a)"', "add: launch: a is neither a scalar argument nor a constant"),
    ('launch = "elementwise(n; 1)"', "add: launch: 'n; 1' is not integer arithmetic"),
    ('launch = "warps(n)"', "add: launch: vulkan: warps has no form on vulkan"),
    ('launch = "rows(n, n, alpha)"', "add: launch: rows: alpha is not a tensor argument"),
    ('launch = "rows(n)"', r"add: launch: rows takes \(rows, row_elems, vector_arg\)"),
    ('launch = { cuda = "elementwise(n)" }', "add: launch: expected a class, or a table of one per backend"),
    ("", "add: launch: expected a class"),
])
def test_bad_launch_classes_name_the_op(tmp_path, replacement, match):
    text = catalogue_text()
    assert text.count(ADD_LAUNCH) >= 1
    text = text.replace('name = "add"\n' + ADD_LAUNCH, 'name = "add"\n' + replacement)
    with pytest.raises(gen_ops.CatalogueError, match=match):
        load_text(tmp_path, text)


def test_an_external_op_has_no_launch_class(tmp_path):
    text = catalogue_text().replace('kind = "external"\n', 'kind = "external"\nlaunch = "custom"\n', 1)
    with pytest.raises(gen_ops.CatalogueError, match="matmul: launch: an external op has no launch function"):
        load_text(tmp_path, text)


def run_check(tmp_path, catalogue):
    """check_op_kernels.py over this build's libraries, as meson runs it."""
    if not os.path.exists(os.path.join(GENERATED, "op_params.cuh")) or shutil.which("nm") is None:
        pytest.skip("needs a meson build directory as DATAFLOW_LIB_DIR and nm")
    vulkan = os.path.join(LIB_DIR, "libdataflow_vulkan.so")
    cmd = [sys.executable, os.path.join(TOOLS, "check_op_kernels.py"), catalogue, str(tmp_path / "stamp"),
           "--nm", "nm", "--host", os.path.join(LIB_DIR, "libdataflow_host_ops.so"),
           "--cuda", os.path.join(LIB_DIR, "libdataflow_cuda.so"), "--cpp", "cc",
           "--cuda-kernels", *glob.glob(os.path.join(ROOT, "backends", "cuda", "kernels", "*.cu")),
           "--cuda-include", os.path.join(ROOT, "backends", "cuda", "kernels"),
           os.path.join(ROOT, "libdataflow", "internal"), GENERATED]
    if os.path.exists(vulkan):
        cmd += ["--vulkan", vulkan]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.slow  # preprocesses every CUDA kernel file
def test_the_kernel_check_passes_on_this_build(tmp_path):
    r = run_check(tmp_path, CATALOGUE)
    assert r.returncode == 0, r.stderr
    ops, _ = gen_ops.load(CATALOGUE)
    assert (tmp_path / "stamp").read_text().startswith(f"{len(ops)} ops checked on host, cuda")


@pytest.mark.slow
def test_the_kernel_check_names_an_op_without_kernels(tmp_path):
    # scale_twice: a copy of scale that no backend has kernels for (its CUDA source would be
    # scale.cu, by the longest prefix, which defines no dataflow_cuda_scale_twice_*)
    text = catalogue_text()
    start = text.index('[[op]]\nname = "scale"')
    entry = text[start:text.index("[[op]]", start + 1)]
    (tmp_path / "with_fake.toml").write_text(text + "\n" + entry.replace('name = "scale"', 'name = "scale_twice"'))
    r = run_check(tmp_path, str(tmp_path / "with_fake.toml"))
    assert r.returncode != 0
    assert "scale_twice on host (libdataflow_host_ops.so): missing dataflow_host_scale_twice_launch, " \
           "dataflow_host_scale_twice_fp32" in r.stderr
    assert "scale_twice on cuda (libdataflow_cuda.so): missing dataflow_cuda_scale_twice_launch, " \
           "dataflow_cuda_scale_twice_fp32 (in kernels/scale.cu)" in r.stderr
    assert "\n  scale on" not in r.stderr  # the real ops still pass
    assert not (tmp_path / "stamp").exists()
