/* Loading and initializing MPI at run time, so that libdataflow needs MPI only when a program
 * asks for distributed work. RTLD_GLOBAL: Open MPI's own plugins resolve symbols of libmpi. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_library.h"

#define MPI_THREAD_SERIALIZED_OMPI 2
#define MPI_THREAD_MULTIPLE_OMPI 3
#define DEFAULT_LIBRARY "libmpi.so.40"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Mpi_Library lib;
static void *dl;
static int ready, users, initialized_here, finalized;
static int (*Finalize)(void);

static Dataflow_Status load(const char *path)
{
	dl = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!dl)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED,
					  "distributed: cannot load MPI from '%s' (%s); install Open MPI (Debian: apt-get "
					  "install openmpi-bin libopenmpi-dev), or point DATAFLOW_MPI_LIBRARY at libmpi.so.40, "
					  "and launch the ranks with mpirun",
					  path, dlerror());
	if (!dlsym(dl, "ompi_mpi_comm_world")) {
		dlclose(dl);
		dl = NULL;
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "distributed: '%s' is not Open MPI (no ompi_mpi_comm_world): only Open MPI's ABI "
					  "is supported so far (MPICH's integer handles are not)",
					  path);
	}
	struct {
		const char *name;
		void **slot;
	} syms[] = {
		{"MPI_Comm_rank", (void **)&lib.Comm_rank},
		{"MPI_Comm_size", (void **)&lib.Comm_size},
		{"MPI_Comm_dup", (void **)&lib.Comm_dup},
		{"MPI_Comm_free", (void **)&lib.Comm_free},
		{"MPI_Comm_set_errhandler", (void **)&lib.Comm_set_errhandler},
		{"MPI_Isend", (void **)&lib.Isend},
		{"MPI_Irecv", (void **)&lib.Irecv},
		{"MPI_Test", (void **)&lib.Test},
		{"MPI_Error_string", (void **)&lib.Error_string},
		{"MPI_Finalize", (void **)&Finalize},
		{"ompi_mpi_comm_world", &lib.comm_world},
		{"ompi_mpi_byte", &lib.byte},
		{"ompi_mpi_errors_return", &lib.errors_return},
	};
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].slot = dlsym(dl, syms[i].name);
		if (!*syms[i].slot) {
			dlclose(dl);
			dl = NULL;
			return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "distributed: '%s' lacks the symbol %s", path,
						  syms[i].name);
		}
	}
	return DATAFLOW_OK;
}

static Dataflow_Status init_mpi(void)
{
	int (*initialized)(int *) = (int (*)(int *))dlsym(dl, "MPI_Initialized");
	int (*init_thread)(int *, char ***, int, int *) = (int (*)(int *, char ***, int, int *))dlsym(dl, "MPI_Init_thread");
	int flag = 0, provided = 0;
	if (!initialized || !init_thread || initialized(&flag) != 0)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "distributed: MPI_Initialized is missing or failed");
	if (flag)
		return DATAFLOW_OK; /* the program's (e.g. mpi4py's): its threading level is its business */
	if (init_thread(NULL, NULL, MPI_THREAD_MULTIPLE_OMPI, &provided) != 0)
		return dataflow_set_error(DATAFLOW_ERR_BACKEND, "distributed: MPI_Init_thread failed");
	initialized_here = 1;
	/* collectives run on stream workers, one MPI call at a time (the transport serializes) */
	if (provided < MPI_THREAD_SERIALIZED_OMPI)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "distributed: MPI gives thread level %d; dataflow needs MPI_THREAD_SERIALIZED (2)",
					  provided);
	return DATAFLOW_OK;
}

Dataflow_Status mpi_library_acquire(const char *path, const Mpi_Library **mpi)
{
	if (!path || !*path)
		path = getenv("DATAFLOW_MPI_LIBRARY");
	if (!path || !*path)
		path = DEFAULT_LIBRARY;
	pthread_mutex_lock(&lock);
	Dataflow_Status st = DATAFLOW_OK;
	if (finalized)
		st = dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					"distributed: MPI was finalized when the last communicator went; it cannot start "
					"again in this process");
	if (st == DATAFLOW_OK && !dl)
		st = load(path);
	if (st == DATAFLOW_OK && !ready) {
		st = init_mpi();
		ready = st == DATAFLOW_OK;
	}
	if (st == DATAFLOW_OK) {
		users++;
		*mpi = &lib;
	}
	pthread_mutex_unlock(&lock);
	return st;
}

void mpi_library_release(int finalize)
{
	pthread_mutex_lock(&lock);
	if (--users == 0 && initialized_here && finalize) {
		Finalize();
		finalized = 1;
	}
	pthread_mutex_unlock(&lock);
}

void mpi_error_text(const Mpi_Library *mpi, int code, char *buf, int size)
{
	char text[512] = "";
	int len = 0;
	if (mpi->Error_string(code, text, &len) != 0)
		text[0] = 0;
	snprintf(buf, (size_t)size, "MPI error %d: %s", code, text);
}
