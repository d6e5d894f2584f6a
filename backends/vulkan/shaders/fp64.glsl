// fp64 tensors are 64-bit words in memory (common.glsl's fp64_ref, so that kernels without
// doubles need no Float64 capability); kernels that compute in double include this file and
// need the device's shaderFloat64. LOAD_DOUBLE(d, r) / STORE_DOUBLE(d, r, x) read and write
// element 0 of a tensor r of dtype d (fp32 or fp64) as a double (rounded once into fp32).
double load_double_fp32(fp32_ref r) { return double(r.v[0]); }
double load_double_fp64(fp64_ref r) { return uint64BitsToDouble(r.v[0]); }
void store_double_fp32(fp32_ref r, double x) { r.v[0] = float(x); }
void store_double_fp64(fp64_ref r, double x) { r.v[0] = doubleBitsToUint64(x); }
#define LOAD_DOUBLE_(d, r) load_double_##d(r)
#define LOAD_DOUBLE(d, r) LOAD_DOUBLE_(d, r)
#define STORE_DOUBLE_(d, r, x) store_double_##d(r, x)
#define STORE_DOUBLE(d, r, x) STORE_DOUBLE_(d, r, x)
