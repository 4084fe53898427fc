/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/*
 * The kernel's per-CPU ring-buffer counters (per_cpu/cpuN/stats) summed over the lives of the
 * buffer. Setting trace_clock (tpd's Configure, another process, tpd putting its clock back) or
 * truncating the instance's trace clears a CPU's buffer and sets its counters back to zero: loss
 * accounts that take differences of the raw counters would then count nothing until the counters
 * climbed past their old values again. Counted through a CpuAccount they only ever grow. Pure code:
 * the caller reads the stats file and says when it cleared the buffer itself.
 */

typedef struct CpuStats {
        uint64_t entries; /* in the buffer, not read yet: not summed over lives */
        uint64_t overrun;
        uint64_t commit_overrun;
        uint64_t dropped;
        uint64_t read;
} CpuStats;

typedef struct CpuAccount {
        CpuStats last; /* the kernel's counters at the last sample */
        CpuStats base; /* what the earlier lives of the buffer counted */
        bool sampled;
        uint64_t clears; /* lives that ended */
} CpuAccount;

/* Notes the kernel's counters now and returns in *ret (may be now) the counters summed over the
 * buffer's lives. A counter lower than at the last sample means the buffer was cleared in between
 * (counters never go back otherwise): the last sample closes the life before. What the counters
 * grew by between the last sample and the clear is not known; a clear is seen only while some
 * counter is still below its old value. Returns true when a clear was seen. */
bool cpu_account_sample(CpuAccount *a, const CpuStats *now, CpuStats *ret);

/* The caller cleared the buffer (it wrote trace_clock) right after the last sample: that sample
 * closes the buffer's life, and the records the buffer still held then were thrown away with it,
 * counted as overrun. now: the counters read after the clear, or NULL when they could not be. */
void cpu_account_cleared(CpuAccount *a, const CpuStats *now);
