/* Sizes and times as text in the unit that suits them: a plan of a small model is kilobytes and
 * microseconds, one of a large model hundreds of gigabytes and seconds, and a fixed unit prints
 * one of them as zeros. */
#include <stdio.h>

#include "ring_internal.h"

Ring_Text ring_bytes_text(double bytes)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	Ring_Text t;
	int u = 0;
	while (u < 5 && (bytes >= 1024.0 || bytes <= -1024.0)) {
		bytes /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(t.text, sizeof(t.text), "%.0f B", bytes);
	else /* three significant digits */
		snprintf(t.text, sizeof(t.text), bytes < 9.995 ? "%.2f %s" : bytes < 99.95 ? "%.1f %s" : "%.0f %s", bytes,
			 units[u]);
	return t;
}

const char *ring_seconds_unit(double seconds, double *scale)
{
	if (seconds >= 1.0 || seconds <= 0.0) {
		*scale = 1.0;
		return "s";
	}
	if (seconds >= 1e-3) {
		*scale = 1e3;
		return "ms";
	}
	*scale = 1e6;
	return "us";
}
