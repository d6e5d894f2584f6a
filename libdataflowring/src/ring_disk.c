/* The ring's disk tier: every block's AdamW m and v (and fp32 master weights) in one file
 * under a directory, a working
 * copy (unlinked as soon as it is made: a crash leaves nothing behind, and checkpoints, written
 * atomically elsewhere, read it through dataflow_ring_executor_read). The optimizer streams it
 * through two aligned host staging buffers: reads and writes are host work on the disk stream,
 * ordered against the inbound, optimizer and outbound streams by events, so block b + 1's
 * state comes in while block b updates. O_DIRECT where the file system takes it (tmpfs before
 * Linux 6.6 does not), else buffered; an optional throttle emulates a slower disk. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ring_exec_internal.h"

/* O_DIRECT wants buffers, offsets and lengths in multiples of the logical block: 4 KiB covers
 * the common ones (512 B and 4 KiB sectors) */
enum { DISK_ALIGN = 4096 };

typedef struct {
	Ring_Disk *disk;
	int block, write;
} Disk_Job;

/* a block's region [m | v | master] in the file, each part starting 4 KiB-aligned */
typedef struct {
	int64_t offset, v_offset, master_offset, bytes;
	Disk_Job jobs[2]; /* read, write */
} Disk_Block;

struct Ring_Disk {
	int fd, direct;
	double rate;             /* bytes/s each read and write is held to (0: none) */
	Disk_Block *blocks;
	char *stage[2];          /* block b's state is staged in stage[b % 2] */
	Track stage_track[2];
	atomic_int failed;
	char message[512];
	uint64_t stage_bytes;
};

static int64_t align_disk(int64_t n)
{
	return (n + DISK_ALIGN - 1) / DISK_ALIGN * DISK_ALIGN;
}

static double now_seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* bytes at off, whole (short transfers and EINTR resumed), then held to the throttle's rate;
 * returns 0 or an errno */
static int transfer(Ring_Disk *d, char *buf, int64_t bytes, int64_t off, int write)
{
	double start = now_seconds();
	for (int64_t done = 0; done < bytes;) {
		ssize_t n = write ? pwrite(d->fd, buf + done, (size_t)(bytes - done), (off_t)(off + done))
				  : pread(d->fd, buf + done, (size_t)(bytes - done), (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EIO; /* a read past the end: the file was cut short */
		done += n;
	}
	double left = d->rate > 0 ? (double)bytes / d->rate - (now_seconds() - start) : 0;
	if (left > 0) {
		struct timespec t = {(time_t)left, (long)((left - floor(left)) * 1e9)};
		while (nanosleep(&t, &t) != 0 && errno == EINTR)
			;
	}
	return 0;
}

static void fail(Ring_Disk *d, const char *what, int block, int64_t bytes, int64_t off, int err)
{
	int expected = 0;
	if (atomic_compare_exchange_strong(&d->failed, &expected, 1))
		snprintf(d->message, sizeof(d->message),
			 "ring disk: %s of block %d's optimizer state (%lld bytes at offset %lld) failed: %s", what, block,
			 (long long)bytes, (long long)off, strerror(err));
}

static void run_job(void *arg)
{
	Disk_Job *j = arg;
	Ring_Disk *d = j->disk;
	if (atomic_load(&d->failed)) /* the state is already lost: leave the file as it is */
		return;
	const Disk_Block *blk = &d->blocks[j->block];
	int err = transfer(d, d->stage[j->block % 2], blk->bytes, blk->offset, j->write);
	if (err)
		fail(d, j->write ? "write" : "read", j->block, blk->bytes, blk->offset, err);
}

int ring_disk_holds(const Dataflow_Ring_Executor *x, Dataflow_Block_Kind kind)
{
	return x->disk && (kind == DATAFLOW_BLOCK_ADAM_M || kind == DATAFLOW_BLOCK_ADAM_V ||
			   (kind == DATAFLOW_BLOCK_MASTER && x->master));
}

/* where a kind of block b starts in its region */
static int64_t kind_offset(const Ring_Disk *d, int b, Dataflow_Block_Kind kind)
{
	const Disk_Block *blk = &d->blocks[b];
	return kind == DATAFLOW_BLOCK_ADAM_V ? blk->v_offset : kind == DATAFLOW_BLOCK_MASTER ? blk->master_offset : 0;
}

static Dataflow_Status check_request(const Dataflow_Ring_Executor *x, const Dataflow_Ring_Disk *disk)
{
	const Dataflow_Ring_Plan *p = &x->plan;
	if (p->disk_bytes[DATAFLOW_RING_HOST_PARAMS] || p->disk_bytes[DATAFLOW_RING_HOST_GRADS])
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "ring executor: the plan keeps weights or gradients on disk; the executor keeps "
					  "only optimizer state there yet (give more host memory)");
	if (p->optimizer == DATAFLOW_RING_OPT_DEVICE_RESIDENT)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor: the plan keeps optimizer state both on the device and on disk");
	if (!disk || !disk->directory || !disk->directory[0])
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor: the plan keeps optimizer state on disk: a disk directory is required "
					  "(dataflow_ring_executor_create_with_disk)");
	if (!(disk->bytes_per_sec >= 0) || !isfinite(disk->bytes_per_sec))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor: disk bytes_per_sec must be finite and >= 0 (0: no throttle), got %g",
					  disk->bytes_per_sec);
	int n = dataflow_handle_num_streams(x->h);
	if (disk->stream < 0 || disk->stream >= n)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor: disk stream must be an id in [0, %d) (the handle's streams), got %d",
					  n, disk->stream);
	struct stat st;
	if (stat(disk->directory, &st) != 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring executor: disk directory %s: %s",
					  disk->directory, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring executor: disk directory %s is not a directory",
					  disk->directory);
	return DATAFLOW_OK;
}

/* The file, unlinked at once; O_DIRECT kept only when an aligned write goes through. */
static Dataflow_Status open_file(Ring_Disk *d, const char *directory)
{
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/dataflow-ring-state-XXXXXX", directory) >= (int)sizeof(path))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring executor: disk directory path is too long");
	d->direct = 1;
	d->fd = mkostemp(path, O_DIRECT | O_CLOEXEC);
	if (d->fd < 0 && errno == EINVAL) {
		d->direct = 0;
		d->fd = mkostemp(path, O_CLOEXEC);
	}
	if (d->fd < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring executor: disk directory %s is not writable: %s",
					  directory, strerror(errno));
	unlink(path);
	if (d->direct && transfer(d, d->stage[0], DISK_ALIGN, 0, 1) != 0) {
		d->direct = 0;
		if (fcntl(d->fd, F_SETFL, fcntl(d->fd, F_GETFL) & ~O_DIRECT) != 0)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring executor: disk directory %s: %s",
						  directory, strerror(errno));
	}
	return DATAFLOW_OK;
}

Dataflow_Status ring_disk_open(Dataflow_Ring_Executor *x, const Dataflow_Ring_Disk *disk)
{
	if (!x->plan.disk_bytes[DATAFLOW_RING_HOST_OPTIMIZER_STATE] && !x->plan.disk_bytes[DATAFLOW_RING_HOST_PARAMS] &&
	    !x->plan.disk_bytes[DATAFLOW_RING_HOST_GRADS])
		return DATAFLOW_OK; /* nothing on disk: a directory given is not used */
	TRY(check_request(x, disk));
	Ring_Disk *d = calloc(1, sizeof(*d));
	if (!d)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring executor: host allocation failed");
	x->disk = d;
	d->fd = -1;
	d->rate = disk->bytes_per_sec;
	if (!(d->blocks = calloc((size_t)x->N, sizeof(Disk_Block))))
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring executor: host allocation failed");
	int64_t total = 0, largest = DISK_ALIGN;
	for (int b = 0; b < x->N; b++) {
		const Ring_Block *blk = &x->blocks[b];
		Disk_Block *r = &d->blocks[b];
		r->offset = total;
		r->v_offset = align_disk(blk->bytes[DATAFLOW_BLOCK_ADAM_M]);
		r->master_offset = r->v_offset + align_disk(blk->bytes[DATAFLOW_BLOCK_ADAM_V]);
		r->bytes = r->master_offset + (x->master ? align_disk(blk->bytes[DATAFLOW_BLOCK_MASTER]) : 0);
		total += r->bytes;
		largest = r->bytes > largest ? r->bytes : largest;
		for (int w = 0; w < 2; w++)
			r->jobs[w] = (Disk_Job){d, b, w};
	}
	for (int k = 0; k < 2; k++) {
		if (!(d->stage[k] = aligned_alloc(DISK_ALIGN, (size_t)largest)))
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
						  "ring executor: host allocation of %lld bytes of disk staging failed",
						  (long long)largest);
		memset(d->stage[k], 0, (size_t)largest);
		Dataflow_Status st = dataflow_enable_access_to_host_mem(x->h, d->stage[k], (uint64_t)largest, 0);
		if (st != DATAFLOW_OK) {
			free(d->stage[k]);
			d->stage[k] = NULL;
			return st;
		}
		d->stage_bytes += (uint64_t)largest;
	}
	x->host_bytes += d->stage_bytes;
	TRY(open_file(d, disk->directory));
	int err = posix_fallocate(d->fd, 0, (off_t)total); /* zeros: fresh m and v in every precision */
	if (err == EOPNOTSUPP || err == EINVAL)
		err = ftruncate(d->fd, (off_t)total) == 0 ? 0 : errno;
	if (err)
		return dataflow_set_error(err == ENOSPC || err == EFBIG ? DATAFLOW_ERR_OUT_OF_MEMORY : DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor: disk directory %s has no room for %lld bytes of optimizer state: %s",
					  disk->directory, (long long)total, strerror(err));
	x->s[RS_DISK] = disk->stream;
	return DATAFLOW_OK;
}

void ring_disk_close(Dataflow_Ring_Executor *x)
{
	Ring_Disk *d = x->disk;
	if (!d)
		return;
	if (d->fd >= 0)
		close(d->fd);
	for (int k = 0; k < 2; k++)
		if (d->stage[k]) {
			dataflow_disable_access_to_host_mem(x->h, d->stage[k]);
			free(d->stage[k]);
		}
	free(d->blocks);
	free(d);
	x->disk = NULL;
}

const char *dataflow_ring_executor_disk_mode(const Dataflow_Ring_Executor *x)
{
	return x && x->disk ? (x->disk->direct ? "O_DIRECT" : "buffered") : NULL;
}

static Dataflow_Status queue(Dataflow_Ring_Executor *x, int b, int write)
{
	Ring_Disk *d = x->disk;
	Track *t = &d->stage_track[b % 2];
	Dataflow_Trace_Span *span;
	TRY(track_before(x, t, RS_DISK));
	TRY(ring_span_begin(x, RS_DISK, write ? DATAFLOW_RING_WORK_DISK_WRITE : DATAFLOW_RING_WORK_DISK_READ, b, -1,
			    (uint64_t)d->blocks[b].bytes, &span));
	TRY(dataflow_submit_host_op(x->h, run_job, &d->blocks[b].jobs[write], x->s[RS_DISK]));
	TRY(ring_span_end(x, span));
	return track_after(x, t, RS_DISK);
}

Dataflow_Status ring_disk_before(Dataflow_Ring_Executor *x, int b)
{
	Ring_Disk *d = x->disk;
	if (!d)
		return DATAFLOW_OK;
	if (b == 0)
		TRY(queue(x, 0, 0));
	if (b + 1 < x->N) /* the next block's state comes in while this one updates */
		TRY(queue(x, b + 1, 0));
	Ring_Block *blk = &x->blocks[b];
	blk->host[DATAFLOW_BLOCK_ADAM_M] = d->stage[b % 2];
	blk->host[DATAFLOW_BLOCK_ADAM_V] = d->stage[b % 2] + d->blocks[b].v_offset;
	if (x->master)
		blk->host[DATAFLOW_BLOCK_MASTER] = d->stage[b % 2] + d->blocks[b].master_offset;
	TRY(track_before(x, &d->stage_track[b % 2], RS_IN));
	return track_before(x, &d->stage_track[b % 2], RS_OPT);
}

Dataflow_Status ring_disk_after(Dataflow_Ring_Executor *x, int b)
{
	Ring_Disk *d = x->disk;
	if (!d)
		return DATAFLOW_OK;
	Track *t = &d->stage_track[b % 2];
	TRY(track_after(x, t, RS_IN));
	TRY(track_after(x, t, RS_OPT));
	TRY(track_after(x, t, RS_OUT));
	TRY(queue(x, b, 1));
	Ring_Block *blk = &x->blocks[b]; /* no home outside the apply: reads go through the file */
	blk->host[DATAFLOW_BLOCK_ADAM_M] = blk->host[DATAFLOW_BLOCK_ADAM_V] = blk->host[DATAFLOW_BLOCK_MASTER] = NULL;
	return DATAFLOW_OK;
}

Dataflow_Status ring_disk_status(Dataflow_Ring_Executor *x)
{
	if (!x->disk || !atomic_load(&x->disk->failed))
		return DATAFLOW_OK;
	return dataflow_set_error(DATAFLOW_ERR_BACKEND, "%s", x->disk->message);
}

Dataflow_Status ring_disk_copy(Dataflow_Ring_Executor *x, int b, Dataflow_Block_Kind kind, void *buffer, int write)
{
	Ring_Disk *d = x->disk; /* the caller waited: staging is free */
	int64_t bytes = x->blocks[b].bytes[kind], span = align_disk(bytes);
	int64_t off = d->blocks[b].offset + kind_offset(d, b, kind);
	char *stage = d->stage[0];
	if (write) {
		memmove(stage, buffer, (size_t)bytes); /* buffer may be the staging (ring_disk_set_master) */
		memset(stage + bytes, 0, (size_t)(span - bytes));
	}
	int err = transfer(d, stage, span, off, write);
	if (err)
		return dataflow_set_error(DATAFLOW_ERR_BACKEND, "ring disk: %s of block %d's %s failed: %s",
					  write ? "write" : "read", b,
					  kind == DATAFLOW_BLOCK_ADAM_M ? "m" : kind == DATAFLOW_BLOCK_ADAM_V ? "v" : "master weights",
					  strerror(err));
	if (!write)
		memcpy(buffer, stage, (size_t)bytes);
	return DATAFLOW_OK;
}

Dataflow_Status ring_disk_set_master(Dataflow_Ring_Executor *x, int b, const void *param)
{
	void *stage = x->disk->stage[0]; /* the caller waited: staging is free */
	TRY(dataflow_submit_cast(x->h, x->s[RS_OPT], DATAFLOW_BF16, DATAFLOW_FP32, x->blocks[b].numel, param, stage));
	TRY(dataflow_sync_stream(x->h, x->s[RS_OPT]));
	return ring_disk_copy(x, b, DATAFLOW_BLOCK_MASTER, stage, 1);
}
