/* The planner's disk tier: which host kinds go into files when host memory runs out. The
 * optimizer state goes first (touched once a step), then the weights (read every round),
 * then the gradients (written every round); a kind moves whole, so the executor keeps one
 * rule per kind, and the host keeps two blocks of it as staging (one in use, one moving). */
#include "ring_internal.h"

int ring_disk_place(const Ring_Context *x, double host[DATAFLOW_RING_HOST_NUM], double disk[DATAFLOW_RING_HOST_NUM],
		    const double largest[DATAFLOW_RING_HOST_NUM])
{
	static const struct {
		Dataflow_Ring_Host_Purpose purpose;
		int bit;
	} order[3] = {{DATAFLOW_RING_HOST_OPTIMIZER_STATE, DATAFLOW_RING_DISK_OPTIMIZER_STATE},
		      {DATAFLOW_RING_HOST_PARAMS, DATAFLOW_RING_DISK_PARAMS},
		      {DATAFLOW_RING_HOST_GRADS, DATAFLOW_RING_DISK_GRADS}};
	int bits = 0;
	for (int i = 0; i < 3 && x->req->disk_bytes > 0; i++) {
		double sum = 0;
		for (int p = 0; p < DATAFLOW_RING_HOST_NUM; p++)
			sum += host[p];
		Dataflow_Ring_Host_Purpose p = order[i].purpose;
		if (sum <= (double)x->req->host_bytes)
			break;
		if (x->req->disk_kinds && !(x->req->disk_kinds & order[i].bit))
			continue;
		if (host[p] <= 2 * (largest[p] + 3 * 4096)) /* nothing to gain: staging would take as much */
			continue;
		disk[p] = host[p];
		host[p] = 0;
		/* O_DIRECT: each of a staged block's m, v, master (or its one kind) rounds up to 4 KiB */
		host[DATAFLOW_RING_HOST_DISK_STAGING] += 2 * (largest[p] + 3 * 4096);
		bits |= order[i].bit;
	}
	return bits;
}

Dataflow_Status ring_disk_short(const Dataflow_Ring_Request *r, double need)
{
	Ring_Text disk = ring_bytes_text((double)r->disk_bytes), device = ring_bytes_text((double)r->device_bytes);
	Ring_Text host = ring_bytes_text((double)r->host_bytes), needed = ring_bytes_text(need);
	return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
				  "ring plan: nothing fits in %s of disk (disk_bytes): plans that fit the %s device and %s "
				  "host need at least %s on disk",
				  disk.text, device.text, host.text, needed.text);
}
