#ifndef DATAFLOW_MPI_LIBRARY_H
#define DATAFLOW_MPI_LIBRARY_H

/* MPI as dlopen finds it: the few functions the transport calls, with Open MPI's ABI (handles
 * are pointers to the library's predefined objects). MPICH's ABI (libmpi.so.12: integer
 * handles) would need a second table and is refused by name for now. */

#include "comm_internal.h"

typedef void *Mpi_Obj; /* MPI_Comm, MPI_Datatype, MPI_Errhandler, MPI_Request */

typedef struct {
	int (*Comm_rank)(Mpi_Obj, int *);
	int (*Comm_size)(Mpi_Obj, int *);
	int (*Comm_dup)(Mpi_Obj, Mpi_Obj *);
	int (*Comm_free)(Mpi_Obj *);
	int (*Comm_set_errhandler)(Mpi_Obj, Mpi_Obj);
	int (*Isend)(const void *, int, Mpi_Obj, int, int, Mpi_Obj, Mpi_Obj *);
	int (*Irecv)(void *, int, Mpi_Obj, int, int, Mpi_Obj, Mpi_Obj *);
	int (*Test)(Mpi_Obj *, int *, void *);
	int (*Error_string)(int, char *, int *);
	Mpi_Obj comm_world, byte, errors_return;
} Mpi_Library;

/* Loads MPI (once per process) and initializes it unless the program did; counts a user.
 * Errors name the library tried and what to install. */
COMM_INTERNAL Dataflow_Status mpi_library_acquire(const char *path, const Mpi_Library **mpi);
/* Drops a user; the last one finalizes MPI if dataflow initialized it and finalize is 1. */
COMM_INTERNAL void mpi_library_release(int finalize);
/* "MPI error <code>: <MPI's text>" into buf. */
COMM_INTERNAL void mpi_error_text(const Mpi_Library *mpi, int code, char *buf, int size);

#endif
