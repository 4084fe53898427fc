/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kshark-load: opens a trace-cmd data file with libkshark, the library KernelShark loads files
 * with, and prints every entry it gets, one line each: CPU PID TIMESTAMP_NS EVENT.
 *
 *   kshark-load FILE
 *
 * The last line is "entries N". Exit 0; 1 when libkshark cannot open or load the file.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <libkshark.h>

int main(int argc, char *argv[]) {
        struct kshark_context *ctx = NULL;
        struct kshark_entry **rows = NULL;
        ssize_t n;
        int sd, r = 1;

        if (argc != 2) {
                fprintf(stderr, "usage: kshark-load FILE\n");
                return 2;
        }
        if (!kshark_instance(&ctx)) {
                fprintf(stderr, "kshark-load: cannot make a libkshark context\n");
                return 1;
        }
        sd = kshark_open(ctx, argv[1]);
        if (sd < 0) {
                fprintf(stderr, "kshark-load: kshark_open '%s' failed: %d\n", argv[1], sd);
                goto out;
        }
        n = kshark_load_entries(ctx, sd, &rows);
        if (n < 0) {
                fprintf(stderr, "kshark-load: kshark_load_entries '%s' failed: %zd\n", argv[1], n);
                goto out;
        }
        for (ssize_t i = 0; i < n; i++) {
                char *name = kshark_get_event_name(rows[i]);

                printf("%d %d %" PRId64 " %s\n", rows[i]->cpu, rows[i]->pid, rows[i]->ts, name ? name : "?");
                free(name);
                free(rows[i]);
        }
        printf("entries %zd\n", n);
        r = fflush(stdout) == 0 ? 0 : 1;
out:
        free(rows);
        kshark_free(ctx);
        return r;
}
