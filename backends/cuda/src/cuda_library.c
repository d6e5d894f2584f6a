#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

/* Finds an NVIDIA runtime library (NVRTC, cuBLASLt) the way pip users install them: the
 * nvidia-* wheels put them in site-packages/nvidia/<component or cu13>/lib. Searched, in
 * order: the directories in DATAFLOW_CUDA_LIBRARY_PATH (colon-separated; the Python package
 * sets it to the nvidia/... directories of its interpreter), site-packages next to an
 * installed dataflow package (<site>/dataflow/_lib/libdataflow.so), then the loader's path. */

static void *open_in(const char *dir, const char *stem, char *tried, size_t tried_size)
{
	char pattern[4352];
	snprintf(pattern, sizeof(pattern), "%s/%s.so*", dir, stem);
	glob_t g;
	void *lib = NULL;
	if (glob(pattern, 0, NULL, &g) == 0) {
		/* highest version first: glob sorts, so the last match */
		for (size_t i = g.gl_pathc; i-- > 0 && !lib;)
			lib = dlopen(g.gl_pathv[i], RTLD_NOW | RTLD_LOCAL);
		globfree(&g);
	}
	size_t used = strlen(tried);
	if (!lib && used + 1 < tried_size)
		snprintf(tried + used, tried_size - used, "%s%s", used ? ", " : "", pattern);
	return lib;
}

void *cuda_open_library(const char *stem, const char *const *sonames, char *tried, size_t tried_size)
{
	tried[0] = '\0';
	void *lib = NULL;
	const char *env = getenv("DATAFLOW_CUDA_LIBRARY_PATH");
	if (env) {
		char *dirs = strdup(env), *save = NULL;
		for (char *d = dirs ? strtok_r(dirs, ":", &save) : NULL; d && !lib; d = strtok_r(NULL, ":", &save))
			lib = open_in(d, stem, tried, tried_size);
		free(dirs);
	}
	if (!lib) {
		char pattern[4352];
		snprintf(pattern, sizeof(pattern), "%s/../../nvidia/*/lib", dataflow_library_dir());
		glob_t g;
		if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0) {
			for (size_t i = 0; i < g.gl_pathc && !lib; i++)
				lib = open_in(g.gl_pathv[i], stem, tried, tried_size);
			globfree(&g);
		}
	}
	for (int i = 0; sonames[i] && !lib; i++) {
		lib = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
		size_t used = strlen(tried);
		if (!lib && used + 1 < tried_size)
			snprintf(tried + used, tried_size - used, "%s%s", used ? ", " : "", sonames[i]);
	}
	return lib;
}
