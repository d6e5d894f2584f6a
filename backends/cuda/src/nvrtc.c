#include <dlfcn.h>
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_backend.h"
#include "dataflow/cuda.h"

/* NVRTC, loaded with dlopen (cuda_library.c finds it), compiles CUDA C++ for one real
 * architecture into a cubin. Cubins are cached on disk under the cache directory of
 * python/dataflow/custom_ops.py (DATAFLOW_CACHE_DIR, else ~/.cache/dataflow/native), keyed
 * by SHA-256 of (source, embedded headers, options) plus the arch and the NVRTC version.
 * Headers a .cu file includes from its own directory are not part of the key: change the
 * .cu (or clear the cache) after changing them.
 *
 * Options: C++17, and --fmad=false so that a * b + c rounds twice, as the host kernels and
 * the numpy oracles do (bit-exact results across backends); except for the attention files,
 * whose results are compared within tolerances (tests/helpers/tolerances.py) rather than bit for bit,
 * and where fused multiply-adds save instructions and registers in the softmax. */

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

static struct {
	nvrtcResult (*nvrtcVersion)(int *major, int *minor);
	const char *(*nvrtcGetErrorString)(nvrtcResult result);
	nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *prog, const char *src, const char *name, int num_headers,
					  const char *const *headers, const char *const *include_names);
	nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram prog, int num_options, const char *const *options);
	nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram prog, size_t *size);
	nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram prog, char *log);
	nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram prog, size_t *size);
	nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram prog, char *cubin);
	nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *prog);
	int major, minor;
	char path[4096]; /* the libnvrtc loaded */
} nv;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static Dataflow_Status load_status;
static char load_message[2048];

/* NVRTC dlopens libnvrtc-builtins.so.<major>.<minor> by soname when it compiles. Some wheels'
 * libnvrtc (13.0.88 at least) have no RPATH, so the loader would not look beside it and every
 * compile fails with NVRTC_ERROR_BUILTIN_OPERATION_FAILURE. Loading the builtins first, by
 * absolute path from libnvrtc's own directory, makes that later dlopen find the loaded object
 * by its soname. Absent there (a system CUDA on the loader path), the loader's search stays. */
static void preload_builtins(void *nvrtc)
{
	char dir[4096];
	if (dlinfo(nvrtc, RTLD_DI_ORIGIN, dir) != 0)
		return;
	char path[4200];
	snprintf(path, sizeof(path), "%s/libnvrtc-builtins.so.%d.%d", dir, nv.major, nv.minor);
	if (access(path, R_OK) == 0)
		dlopen(path, RTLD_NOW | RTLD_LOCAL); /* held for the process's life, as libnvrtc is */
}

static void load(void)
{
	static const char *const sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
	char tried[1536];
	void *lib = cuda_open_library("libnvrtc", sonames, tried, sizeof(tried));
	if (!lib) {
		load_status = DATAFLOW_ERR_LOAD_FAILED;
		snprintf(load_message, sizeof(load_message),
			 "cuda backend: cannot load NVRTC (pip install nvidia-cuda-nvrtc, or set "
			 "DATAFLOW_CUDA_LIBRARY_PATH); tried %s",
			 tried);
		return;
	}
	static const char *const names[] = {"nvrtcVersion",	   "nvrtcGetErrorString",    "nvrtcCreateProgram",
					     "nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog",
					     "nvrtcGetCUBINSize",   "nvrtcGetCUBIN",	     "nvrtcDestroyProgram"};
	void **slots = (void **)&nv; /* the table is the functions, in this order */
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(slots[i] = dlsym(lib, names[i]))) {
			load_status = DATAFLOW_ERR_LOAD_FAILED;
			snprintf(load_message, sizeof(load_message), "cuda backend: NVRTC library lacks %s", names[i]);
			return;
		}
	}
	nv.nvrtcVersion(&nv.major, &nv.minor);
	Dl_info info;
	snprintf(nv.path, sizeof(nv.path), "%s",
		 dladdr((void *)nv.nvrtcVersion, &info) && info.dli_fname ? info.dli_fname : "?");
	preload_builtins(lib);
	load_status = DATAFLOW_OK;
}

static Dataflow_Status nvrtc_load(void)
{
	pthread_once(&load_once, load);
	return load_status == DATAFLOW_OK ? DATAFLOW_OK : dataflow_set_error(load_status, "%s", load_message);
}

/* The embedded .cuh headers, offered to every program (kernels include them by name). */
static int embedded_headers(const char **texts, const char **names, int max)
{
	int n = 0;
	for (int i = 0; i < cuda_num_kernel_sources && n < max; i++) {
		size_t len = strlen(cuda_kernel_sources[i].name);
		if (len > 4 && !strcmp(cuda_kernel_sources[i].name + len - 4, ".cuh")) {
			names[n] = cuda_kernel_sources[i].name;
			texts[n++] = cuda_kernel_sources[i].text;
		}
	}
	return n;
}

#define MAX_HEADERS 16

/* 1 for the project's own kernels/attention*.cu (name: a path or an embedded source's name;
 * source: its text, which must be the embedded one, so a user's file of that name is not) */
static int is_attention(const char *name, const char *source)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	const Cuda_Source *own = cuda_find_source(base);
	return !strncmp(base, "attention", 9) && own && !strcmp(own->text, source);
}

static void options_for(const char *name, const char *source, int arch, const char *include_dir, char arch_opt[32],
			char include_opt[4200], const char **options, int *num_options)
{
	snprintf(arch_opt, 32, "-arch=sm_%d", arch);
	int n = 0;
	options[n++] = arch_opt;
	options[n++] = "-std=c++17";
	options[n++] = is_attention(name, source) ? "--fmad=true" : "--fmad=false";
	if (include_dir) {
		snprintf(include_opt, 4200, "-I%s", include_dir);
		options[n++] = include_opt;
	}
	*num_options = n;
}

/* Compiles without the cache. log receives NVRTC's log (empty when clean). */
static Dataflow_Status compile(const char *name, const char *source, const char *include_dir, int arch, void **cubin,
			       size_t *cubin_size, char *log, size_t log_size)
{
	if (log_size)
		log[0] = '\0';
	Dataflow_Status st = nvrtc_load();
	if (st != DATAFLOW_OK)
		return st;
	const char *header_texts[MAX_HEADERS], *header_names[MAX_HEADERS];
	int num_headers = embedded_headers(header_texts, header_names, MAX_HEADERS);
	nvrtcProgram prog;
	nvrtcResult r = nv.nvrtcCreateProgram(&prog, source, name, num_headers, header_texts, header_names);
	if (r != 0)
		return dataflow_set_error(DATAFLOW_ERR_BACKEND, "nvrtc: nvrtcCreateProgram(%s): %s", name,
					  nv.nvrtcGetErrorString(r));
	char arch_opt[32], include_opt[4200];
	const char *options[8];
	int num_options;
	options_for(name, source, arch, include_dir, arch_opt, include_opt, options, &num_options);
	r = nv.nvrtcCompileProgram(prog, num_options, options);
	size_t n = 0;
	if (nv.nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1) {
		char *full = malloc(n);
		if (full && nv.nvrtcGetProgramLog(prog, full) == 0 && log_size)
			snprintf(log, log_size, "%s", full);
		free(full);
	}
	if (r != 0) {
		st = dataflow_set_error(DATAFLOW_ERR_BACKEND, "nvrtc: compiling %s for sm_%d failed (%s):\n%.3000s", name,
					arch, nv.nvrtcGetErrorString(r), log_size ? log : "");
	} else if (cubin) {
		*cubin = NULL;
		r = nv.nvrtcGetCUBINSize(prog, cubin_size);
		if (r == 0 && !(*cubin = malloc(*cubin_size)))
			st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "nvrtc: no memory for the cubin of %s", name);
		else if (r != 0 || (r = nv.nvrtcGetCUBIN(prog, *cubin)) != 0)
			st = dataflow_set_error(DATAFLOW_ERR_BACKEND, "nvrtc: nvrtcGetCUBIN(%s): %s", name,
						nv.nvrtcGetErrorString(r));
		if (st != DATAFLOW_OK) {
			free(*cubin);
			*cubin = NULL;
		}
	}
	nv.nvrtcDestroyProgram(&prog);
	return st;
}

static void cache_path(const char *name, const char *source, int arch, char *path, size_t path_size)
{
	const char *header_texts[MAX_HEADERS], *header_names[MAX_HEADERS];
	int num_headers = embedded_headers(header_texts, header_names, MAX_HEADERS);
	char arch_opt[32], include_opt[4200];
	const char *options[8];
	int num_options;
	options_for(name, source, arch, NULL, arch_opt, include_opt, options, &num_options);
	unsigned char digest[32];
	unsigned int digest_len = 0;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	EVP_DigestUpdate(md, source, strlen(source) + 1);
	for (int i = 0; i < num_headers; i++)
		EVP_DigestUpdate(md, header_texts[i], strlen(header_texts[i]) + 1);
	for (int i = 0; i < num_options; i++)
		EVP_DigestUpdate(md, options[i], strlen(options[i]) + 1);
	EVP_DigestFinal_ex(md, digest, &digest_len);
	EVP_MD_CTX_free(md);
	char hex[33];
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	const char *dir = getenv("DATAFLOW_CACHE_DIR"), *home = getenv("HOME");
	if (dir && *dir)
		snprintf(path, path_size, "%s/%s-sm_%d-nvrtc%d.%d.cubin", dir, hex, arch, nv.major, nv.minor);
	else
		snprintf(path, path_size, "%s/.cache/dataflow/native/%s-sm_%d-nvrtc%d.%d.cubin", home ? home : ".", hex,
			 arch, nv.major, nv.minor);
}

/* The whole file at path, malloc'ed, with a NUL after its *size bytes; NULL (errno set) when it
 * cannot be opened or read. */
static char *read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *data = n >= 0 ? malloc((size_t)n + 1) : NULL;
	int ok = data && fread(data, 1, (size_t)n, f) == (size_t)n;
	fclose(f);
	if (!ok) {
		free(data);
		return NULL;
	}
	data[n] = '\0';
	*size = (size_t)n;
	return data;
}

static int read_cached(const char *path, void **cubin, size_t *size)
{
	*cubin = read_file(path, size);
	if (*cubin && *size == 0) { /* an empty file is no cubin */
		free(*cubin);
		*cubin = NULL;
	}
	return *cubin != NULL;
}

static void mkdirs(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			mkdir(path, 0755);
			*p = '/';
		}
	}
}

/* A failed write only costs a recompile next time, so it is not an error. Written to a
 * temporary name and renamed: concurrent compilers never see half a file. */
static void write_cached(const char *path, const void *cubin, size_t size)
{
	char dir[4096], tmp[4200];
	snprintf(dir, sizeof(dir), "%s", path);
	mkdirs(dir);
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	FILE *f = fopen(tmp, "wb");
	if (!f)
		return;
	int ok = fwrite(cubin, 1, size, f) == size;
	if (fclose(f) == 0 && ok && rename(tmp, path) == 0)
		return;
	unlink(tmp);
}

Dataflow_Status cuda_read_source(const char *path, char **text, char *dir, size_t dir_size)
{
	size_t size;
	*text = read_file(path, &size);
	if (!*text)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "cannot read CUDA source %s: %s", path, strerror(errno));
	snprintf(dir, dir_size, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(dir, dir_size, ".");
	return DATAFLOW_OK;
}

Dataflow_Status cuda_nvrtc_compile(const char *name, const char *source, const char *include_dir, int arch,
				   void **cubin, size_t *cubin_size)
{
	Dataflow_Status st = nvrtc_load();
	if (st != DATAFLOW_OK)
		return st;
	char path[4096];
	cache_path(name, source, arch, path, sizeof(path));
	if (read_cached(path, cubin, cubin_size))
		return DATAFLOW_OK;
	char log[4096];
	st = compile(name, source, include_dir, arch, cubin, cubin_size, log, sizeof(log));
	if (st == DATAFLOW_OK)
		write_cached(path, *cubin, *cubin_size);
	return st;
}

/* (dataflow/cuda.h) */
Dataflow_Status dataflow_cuda_nvrtc_version(int *major, int *minor, char *path, size_t path_size)
{
	if (!major || !minor || (path_size && !path))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "nvrtc_version: major and minor must be non-NULL, and path too when path_size > 0");
	Dataflow_Status st = nvrtc_load();
	if (st != DATAFLOW_OK)
		return st;
	*major = nv.major;
	*minor = nv.minor;
	if (path_size)
		snprintf(path, path_size, "%s", nv.path);
	return DATAFLOW_OK;
}

/* (dataflow/cuda.h) */
Dataflow_Status dataflow_cuda_compile_cached(const char *source_name, int arch)
{
	const Cuda_Source *src = source_name ? cuda_find_source(source_name) : NULL;
	if (!src || arch <= 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "compile_cached: need an embedded kernel source (like \"attention.cu\") and an arch "
					  "like 90, got %s, %d",
					  source_name ? source_name : "NULL", arch);
	void *cubin = NULL;
	size_t size = 0;
	Dataflow_Status st = cuda_nvrtc_compile(src->name, src->text, NULL, arch, &cubin, &size);
	free(cubin);
	return st;
}

/* 1 if the cubin (an ELF image) names the symbol: its string table holds "\0<name>\0". */
static int cubin_has_symbol(const void *cubin, size_t size, const char *name)
{
	size_t n = strlen(name);
	const char *p = cubin, *end = p + size;
	while (n && (p = memmem(p, (size_t)(end - p), name, n)) != NULL) {
		if (p > (const char *)cubin && p[-1] == '\0' && p + n < end && p[n] == '\0')
			return 1;
		p++;
	}
	return 0;
}

/* (dataflow/cuda.h) Tests fail on any log: warnings count. */
Dataflow_Status dataflow_cuda_compile_check(const char *source_path, int arch, const char *const *symbols,
					    int num_symbols, char *log, size_t log_size)
{
	if (!source_path || arch <= 0 || num_symbols < 0 || (num_symbols && !symbols))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "compile_check: need a source path, an arch like 80 and the symbols, got %s, %d, "
					  "%d symbols",
					  source_path ? source_path : "NULL", arch, num_symbols);
	char *text, dir[4096];
	Dataflow_Status st = cuda_read_source(source_path, &text, dir, sizeof(dir));
	if (st != DATAFLOW_OK)
		return st;
	void *cubin = NULL;
	size_t size = 0;
	st = compile(source_path, text, dir, arch, &cubin, &size, log, log_size);
	free(text);
	for (int i = 0; i < num_symbols && st == DATAFLOW_OK; i++)
		if (!symbols[i] || !cubin_has_symbol(cubin, size, symbols[i]))
			st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "compile_check: %s for sm_%d has no kernel %s",
						source_path, arch, symbols[i] ? symbols[i] : "(NULL)");
	free(cubin);
	return st;
}
