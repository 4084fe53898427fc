/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "cpustats.h"

/* Ends the buffer's life whose last sample is a->last: its counts go into the base. */
static void cpu_account_close(CpuAccount *a) {
        a->base.overrun += a->last.overrun;
        a->base.commit_overrun += a->last.commit_overrun;
        a->base.dropped += a->last.dropped;
        a->base.read += a->last.read;
        a->clears++;
}

bool cpu_account_sample(CpuAccount *a, const CpuStats *now, CpuStats *ret) {
        CpuStats n = *now;
        bool cleared = false;

        if (a->sampled && (n.overrun < a->last.overrun || n.commit_overrun < a->last.commit_overrun ||
                           n.dropped < a->last.dropped || n.read < a->last.read)) {
                cpu_account_close(a);
                cleared = true;
        }
        a->last = n;
        a->sampled = true;
        *ret = (CpuStats){
                .entries = n.entries,
                .overrun = a->base.overrun + n.overrun,
                .commit_overrun = a->base.commit_overrun + n.commit_overrun,
                .dropped = a->base.dropped + n.dropped,
                .read = a->base.read + n.read,
        };
        return cleared;
}

void cpu_account_cleared(CpuAccount *a, const CpuStats *now) {
        /* Records still in the buffer: neither read nor counted by the kernel any more. */
        a->base.overrun += a->last.entries;
        cpu_account_close(a);
        a->last = now ? *now : (CpuStats){};
        a->sampled = true;
}
