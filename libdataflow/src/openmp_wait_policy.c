#include <stdlib.h>

/* The host backend's matmuls (oneDNN on libgomp) and kernels run on OpenMP teams. libgomp's
 * default wait policy keeps a finished team's threads spinning for a while, which is free on
 * idle cores but, beside any other busy process (a browser, an editor, a second job), takes
 * the cores that process and our own next kernel need: training then ran at a quarter to a
 * half of its idle speed with one busy loop beside it, and PASSIVE (sleep at once) kept it
 * near its idle speed. libgomp reads OMP_WAIT_POLICY once, when it is loaded, which is when
 * the host backend is opened, after this library; so the default is set here, at load time,
 * while the program is still starting. A user's own OMP_WAIT_POLICY is left as it is
 * (ACTIVE restores spinning). A libgomp already loaded by something else keeps its policy. */
__attribute__((constructor)) static void dataflow_default_openmp_wait_policy(void)
{
	setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
}
