// Row sums in the host kernels' order (backends/host/kernels/rms_norm.c), so that results match
// the host bit for bit where the device's fp32 is IEEE: lane l (l < 16) takes the elements
// l mod 16 of the row's first hidden & ~15 in order; the lanes are added l + 8, l + 4, l + 2,
// l + 1; the last hidden % 16 elements follow one at a time. A workgroup is 16 lanes (x) by
// ROWS rows (y); ROW_TERM(j) is the fp32 term of element j of the current row.
#define ROWS 4
layout(local_size_x = 16, local_size_y = ROWS) in;
shared float lanes[ROWS][16];
shared float row_total[ROWS];

// Rows go ROWS per workgroup, grid-stride, in a loop every invocation runs the same number of
// times (rows past the end are not `valid`), so that all reach the barriers:
//   for (uint base = gl_WorkGroupID.x * ROWS; base < rows; base += gl_NumWorkGroups.x * ROWS)
// Each lane's sum (lane = gl_LocalInvocationID.x); then, after a barrier, lane 0 of each row
// adds them and the tail into row_total[y]. Called by every invocation (valid or not).
#define ROW_SUM(valid, hidden, ROW_TERM)                                                            \
	{                                                                                          \
		uint l_ = gl_LocalInvocationID.x, y_ = gl_LocalInvocationID.y, h16_ = uint(hidden) & ~15u; \
		precise float acc_ = 0.0;                                                          \
		if (valid)                                                                         \
			for (uint j = l_; j < h16_; j += 16)                                       \
				acc_ += ROW_TERM;                                                  \
		lanes[y_][l_] = acc_;                                                              \
		barrier();                                                                         \
		if (valid && l_ == 0) {                                                            \
			precise float s8_[8], s4_[4];                                              \
			for (int k = 0; k < 8; k++)                                                \
				s8_[k] = lanes[y_][k] + lanes[y_][k + 8];                          \
			for (int k = 0; k < 4; k++)                                                \
				s4_[k] = s8_[k] + s8_[k + 4];                                      \
			precise float s_ = (s4_[0] + s4_[2]) + (s4_[1] + s4_[3]);                  \
			for (uint j = h16_; j < uint(hidden); j++)                                 \
				s_ += ROW_TERM;                                                    \
			row_total[y_] = s_;                                                        \
		}                                                                                  \
		barrier();                                                                         \
	}
