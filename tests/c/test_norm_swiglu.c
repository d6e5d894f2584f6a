/* C-level check of rms_norm (forward, bwd_x, bwd_w with its workspace) and swiglu (forward,
 * backward) through the installed API, in fp32 and bf16, against double-precision references
 * of the formulas in ops.h; run under ASan + UBSan by the tests as well. The exact operation
 * order is checked bit for bit from Python (tests/ops/test_rms_norm.py, tests/ops/test_swiglu.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_test.h"
#include "dataflow/ops.h"

enum { ROWS = 67, HIDDEN = 45 }; /* two dw blocks, the second short; 16-lane tails */

static Dataflow_Handle *h;

/* n values of dt on the device, from fp32 values (rounded to dt, and rounded in vals too) */
static void *upload(DataflowDatatype dt, float *vals, int64_t n)
{
	size_t size = dataflow_datatype_size(dt) * (size_t)n;
	void *bits = malloc(size), *dev;
	CHECK(dataflow_convert(dt, bits, DATAFLOW_FP32, vals, (size_t)n));
	CHECK(dataflow_convert(DATAFLOW_FP32, vals, dt, bits, (size_t)n));
	CHECK(dataflow_alloc_mem(h, size, &dev));
	CHECK(dataflow_submit_inbound_transfer(h, 0, dev, bits, size));
	CHECK(dataflow_sync_stream(h, 0));
	free(bits);
	return dev;
}

static void *alloc(DataflowDatatype dt, int64_t n)
{
	void *dev;
	CHECK(dataflow_alloc_mem(h, dataflow_datatype_size(dt) * (uint64_t)n, &dev));
	return dev;
}

/* device values of dt as fp32 in out */
static void download(DataflowDatatype dt, const void *dev, float *out, int64_t n)
{
	size_t size = dataflow_datatype_size(dt) * (size_t)n;
	void *bits = malloc(size);
	CHECK(dataflow_sync_handle(h));
	CHECK(dataflow_submit_outbound_transfer(h, 0, bits, dev, size));
	CHECK(dataflow_sync_stream(h, 0));
	CHECK(dataflow_convert(DATAFLOW_FP32, out, dt, bits, (size_t)n));
	free(bits);
}

/* max |got - want| / (1 + |want|) */
static double worst(const float *got, const double *want, int64_t n)
{
	double w = 0;
	for (int64_t i = 0; i < n; i++) {
		double e = fabs(got[i] - want[i]) / (1.0 + fabs(want[i]));
		w = e > w || isnan(e) ? e : w;
	}
	return w;
}

static void fill(float *v, int64_t n, unsigned seed, float scale)
{
	srand(seed);
	for (int64_t i = 0; i < n; i++)
		v[i] = scale * ((float)rand() / (float)RAND_MAX - 0.5f);
}

static int test_rms_norm(DataflowDatatype dt, double tol)
{
	static float x[ROWS * HIDDEN], w[HIDDEN], dy[ROWS * HIDDEN], y[ROWS * HIDDEN], rstd[ROWS], dx[ROWS * HIDDEN],
		dw[HIDDEN];
	static double ry[ROWS * HIDDEN], rrstd[ROWS], rdx[ROWS * HIDDEN], rdw[HIDDEN];
	fill(x, ROWS * HIDDEN, 1, 6.0f), fill(w, HIDDEN, 2, 2.0f), fill(dy, ROWS * HIDDEN, 3, 2.0f);
	void *d_x = upload(dt, x, ROWS * HIDDEN), *d_w = upload(dt, w, HIDDEN), *d_dy = upload(dt, dy, ROWS * HIDDEN);
	void *d_y = alloc(dt, ROWS * HIDDEN), *d_rstd = alloc(DATAFLOW_FP32, ROWS), *d_dx = alloc(dt, ROWS * HIDDEN);
	void *d_dw = alloc(DATAFLOW_FP32, HIDDEN), *d_ws;
	int64_t ws_bytes = dataflow_rms_norm_bwd_w_workspace_bytes(ROWS, HIDDEN);
	CHECK(dataflow_alloc_mem(h, (uint64_t)ws_bytes, &d_ws));

	CHECK(dataflow_submit_rms_norm(h, 0, dt, ROWS, HIDDEN, 1e-6f, d_x, d_w, d_y, d_rstd));
	CHECK(dataflow_submit_rms_norm_bwd_x(h, 0, dt, ROWS, HIDDEN, d_dy, d_x, d_w, d_rstd, d_dx));
	Dataflow_Stream_State normed; /* bwd_w on stream 1 waits for rstd from stream 0 */
	CHECK(dataflow_get_stream_state(h, 0, &normed));
	CHECK(dataflow_submit_dependency(h, 1, &normed));
	CHECK(dataflow_submit_rms_norm_bwd_w(h, 1, dt, DATAFLOW_FP32, ROWS, HIDDEN, d_dy, d_x, d_rstd, d_ws, d_dw));
	download(dt, d_y, y, ROWS * HIDDEN), download(DATAFLOW_FP32, d_rstd, rstd, ROWS);
	download(dt, d_dx, dx, ROWS * HIDDEN), download(DATAFLOW_FP32, d_dw, dw, HIDDEN);

	memset(rdw, 0, sizeof(rdw));
	for (int r = 0; r < ROWS; r++) {
		const float *xr = x + r * HIDDEN, *dyr = dy + r * HIDDEN;
		double ss = 0, gx = 0;
		for (int j = 0; j < HIDDEN; j++)
			ss += (double)xr[j] * xr[j], gx += (double)dyr[j] * w[j] * xr[j];
		double rs = 1.0 / sqrt(ss / HIDDEN + 1e-6);
		rrstd[r] = rs;
		for (int j = 0; j < HIDDEN; j++) {
			ry[r * HIDDEN + j] = w[j] * xr[j] * rs;
			rdx[r * HIDDEN + j] = rs * (dyr[j] * w[j] - xr[j] * rs * rs * gx / HIDDEN);
			rdw[j] += dyr[j] * xr[j] * rs;
		}
	}
	double e_y = worst(y, ry, ROWS * HIDDEN), e_r = worst(rstd, rrstd, ROWS);
	double e_dx = worst(dx, rdx, ROWS * HIDDEN), e_dw = worst(dw, rdw, HIDDEN);
	printf("rms_norm %s: y %.2g rstd %.2g dx %.2g dw %.2g\n", dataflow_datatype_name(dt), e_y, e_r, e_dx, e_dw);
	int failed = !(e_y <= tol && e_r <= 1e-6 && e_dx <= tol && e_dw <= 1e-5);

	/* a workspace one element short is rejected, naming it */
	void *d_short;
	CHECK(dataflow_alloc_mem(h, (uint64_t)ws_bytes - sizeof(float), &d_short));
	if (dataflow_submit_rms_norm_bwd_w(h, 0, dt, DATAFLOW_FP32, ROWS, HIDDEN, d_dy, d_x, d_rstd, d_short, d_dw) ==
		    DATAFLOW_OK ||
	    !strstr(dataflow_last_error(), "workspace")) {
		fprintf(stderr, "short workspace accepted or unnamed: %s\n", dataflow_last_error());
		failed = 1;
	}
	void *bufs[] = {d_x, d_w, d_dy, d_y, d_rstd, d_dx, d_dw, d_ws, d_short};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		CHECK(dataflow_free_mem(h, bufs[i]));
	return failed;
}

static int test_swiglu(DataflowDatatype dt, double tol)
{
	enum { N = ROWS * HIDDEN };
	static float g[N], u[N], dout[N], out[N], dg[N], du[N];
	static double rout[N], rdg[N], rdu[N];
	fill(g, N, 4, 24.0f), fill(u, N, 5, 4.0f), fill(dout, N, 6, 2.0f);
	void *d_g = upload(dt, g, N), *d_u = upload(dt, u, N), *d_dout = upload(dt, dout, N);
	void *d_out = alloc(dt, N), *d_dg = alloc(dt, N), *d_du = alloc(dt, N);
	CHECK(dataflow_submit_swiglu(h, 0, dt, ROWS, HIDDEN, d_g, d_u, d_out));
	CHECK(dataflow_submit_swiglu_bwd(h, 0, dt, ROWS, HIDDEN, d_dout, d_g, d_u, d_dg, d_du));
	download(dt, d_out, out, N), download(dt, d_dg, dg, N), download(dt, d_du, du, N);
	for (int i = 0; i < N; i++) {
		double s = 1.0 / (1.0 + exp(-(double)g[i]));
		rout[i] = g[i] * s * u[i];
		rdu[i] = dout[i] * g[i] * s;
		rdg[i] = dout[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
	}
	double e_out = worst(out, rout, N), e_dg = worst(dg, rdg, N), e_du = worst(du, rdu, N);
	printf("swiglu %s: out %.2g d_gate %.2g d_up %.2g\n", dataflow_datatype_name(dt), e_out, e_dg, e_du);
	void *bufs[] = {d_g, d_u, d_dout, d_out, d_dg, d_du};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		CHECK(dataflow_free_mem(h, bufs[i]));
	return !(e_out <= tol && e_dg <= tol && e_du <= tol);
}

int main(void)
{
	Dataflow_Handle_Config config = {.num_streams = 2, .device_memory_bytes = 16u << 20};
	CHECK(dataflow_handle_create("host", &config, &h));
	CHECK(dataflow_register_default_ops(h));
	/* relative to 1 + |value|: fp32 within a few ulps, bf16 within two roundings */
	int failed = test_rms_norm(DATAFLOW_FP32, 1e-5) | test_rms_norm(DATAFLOW_BF16, 1.6e-2) |
		     test_swiglu(DATAFLOW_FP32, 1e-5) | test_swiglu(DATAFLOW_BF16, 1.6e-2);
	dataflow_handle_destroy(h);
	printf(failed ? "FAILED\n" : "ok\n");
	return failed;
}
