/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The event formats the fuzz targets decode and filter against: each DATASET/NAME.format recorded in
 * tests/data, and the header page of "synthetic", parsed into one tep handle as tpd does (8-byte
 * longs, 4 KiB pages). The directory is $TPD_FUZZ_DATA_DIR, else the source tree's.
 */

#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "fuzz.h"

static inline void fuzz_load_dataset(struct tep_handle *tep, const char *dir, bool header) {
        char path[PATH_MAX + 300];
        struct dirent *de;
        DIR *d = opendir(dir);

        if (!d)
                return;
        while ((de = readdir(d))) {
                size_t n = strlen(de->d_name), len;
                char system[256], *buf;
                const char *dot;

                if (header && strcmp(de->d_name, "header_page") == 0) {
                        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                        buf = fuzz_read_file(path, &len);
                        if (buf && tep_parse_header_page(tep, buf, len, 8) < 0)
                                abort();
                        free(buf);
                        continue;
                }
                if (n < 8 || strcmp(de->d_name + n - 7, ".format") != 0)
                        continue;
                dot = strchr(de->d_name, '.');
                snprintf(system, sizeof(system), "%.*s", (int) (dot - de->d_name), de->d_name);
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                buf = fuzz_read_file(path, &len);
                if (!buf)
                        abort();
                /* The same event recorded in two datasets parses once; the second is refused. */
                (void) tep_parse_event(tep, buf, len, system);
                free(buf);
        }
        closedir(d);
}

/* who names the target in the message when the data cannot be read (then it aborts). */
static inline struct tep_handle *fuzz_load_formats(const char *who) {
        const char *datadir = getenv("TPD_FUZZ_DATA_DIR") ?: TPD_FUZZ_DATA_DIR;
        char path[PATH_MAX];
        struct tep_handle *tep;
        struct dirent *de;
        DIR *d;

        tep = tep_alloc();
        if (!tep)
                abort();
        tep_set_long_size(tep, 8);
        tep_set_page_size(tep, 4096);
        /* Keep libtraceevent's parse warnings out of the fuzzer's output. */
        tep_set_loglevel(TEP_LOG_NONE);

        d = opendir(datadir);
        if (!d) {
                fprintf(stderr, "%s: cannot open %s; set TPD_FUZZ_DATA_DIR\n", who, datadir);
                abort();
        }
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s", datadir, de->d_name);
                fuzz_load_dataset(tep, path, strcmp(de->d_name, "synthetic") == 0);
        }
        closedir(d);
        return tep;
}
