/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Writes a trace-cmd data file of a recorded dataset of tests/data, as `tpctl record` writes one
 * (client/datfile.c, libtracecmd) but only with the dataset's formats and names, no kallsyms and no
 * printk formats: a seed of a few KiB for fuzz-capture.
 *
 *   make-capture-seed DATASET_DIR 6|7 OUTPUT [PAGES]
 *
 * PAGES: at most this many pages of each CPU (default: all).
 */

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capdir.h"
#include "datfile.h"
#include "fuzz.h"

#define PAGE_SIZE 4096U

/* The kernel's events/header_event: the same on every kernel since 2.6.31. */
static const char header_event[] = "# compressed entry header\n"
                                   "\ttype_len    :    5 bits\n"
                                   "\ttime_delta  :   27 bits\n"
                                   "\tarray       :   32 bits\n"
                                   "\n"
                                   "\tpadding     : type == 29\n"
                                   "\ttime_extend : type == 30\n"
                                   "\ttime_stamp : type == 31\n"
                                   "\tdata max type_len  == 28\n";

static void add_file(DatMeta *m, const char *path, const char *content, size_t len) {
        size_t n = strlen(path) + 1;
        char *payload = malloc(n + len);

        if (!payload)
                abort();
        memcpy(payload, path, n);
        memcpy(payload + n, content, len);
        if (dat_meta_add_file(m, payload, n + len) < 0) {
                fprintf(stderr, "cannot add %s\n", path);
                exit(EXIT_FAILURE);
        }
        free(payload);
}

static char *read_or_die(const char *dir, const char *name, size_t *len) {
        char path[PATH_MAX];
        char *s;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        s = fuzz_read_file(path, len);
        if (!s) {
                fprintf(stderr, "cannot read %s: %m\n", path);
                exit(EXIT_FAILURE);
        }
        return s;
}

int main(int argc, char **argv) {
        unsigned max_pages = argc > 4 ? (unsigned) atoi(argv[4]) : UINT_MAX, n_cpus = 0;
        char path[PATH_MAX];
        struct dirent *de;
        DatMeta *m;
        DatFile *f;
        char *s, *line, *out_name;
        struct stat st;
        size_t len;
        int dir_fd;
        DIR *d;

        if (argc < 4) {
                fprintf(stderr, "usage: %s DATASET_DIR 6|7 OUTPUT [PAGES]\n", argv[0]);
                return EXIT_FAILURE;
        }
        d = opendir(argv[1]);
        if (!d)
                return perror(argv[1]), EXIT_FAILURE;
        while ((de = readdir(d))) {
                unsigned cpu;
                if (sscanf(de->d_name, "cpu%u.pages", &cpu) == 1 && cpu + 1 > n_cpus)
                        n_cpus = cpu + 1;
        }
        if (capdir_open(argv[3], &dir_fd, &out_name) < 0 ||
            dat_meta_new(dir_fd, n_cpus, PAGE_SIZE, atoi(argv[2]), &m) < 0)
                return EXIT_FAILURE;

        s = read_or_die(argv[1], "header_page", &len);
        add_file(m, "events/header_page", s, len);
        free(s);
        add_file(m, "events/header_event", header_event, sizeof(header_event) - 1);
        add_file(m, "trace_clock", "[boot]\n", 7);
        rewinddir(d);
        while ((de = readdir(d))) {
                char system[256], event[256];

                if (sscanf(de->d_name, "%255[^.].%255[^.].format", system, event) != 2)
                        continue;
                s = read_or_die(argv[1], de->d_name, &len);
                snprintf(path, sizeof(path), "events/%s/%s/format", system, event);
                add_file(m, path, s, len);
                free(s);
        }
        /* libtracecmd 1.3 writes no file without a format of the ftrace system. */
        snprintf(path, sizeof(path), "%s/ftrace.print.format", argv[1]);
        if (access(path, F_OK) < 0) {
                s = read_or_die(argv[1], "../print/ftrace.print.format", &len);
                add_file(m, "events/ftrace/print/format", s, len);
                free(s);
        }
        s = read_or_die(argv[1], "comms", &len);
        for (char *save = NULL, *p = s; (line = strtok_r(p, "\n", &save)); p = NULL) {
                int pid, k = 0;
                if (sscanf(line, "%d %n", &pid, &k) == 1 && k > 0)
                        dat_meta_add_comm(m, pid, line + k, strlen(line + k));
        }
        free(s);
        if (dat_meta_set_kallsyms(m, 0) < 0 || datfile_new(m, &f) < 0)
                return EXIT_FAILURE;
        for (unsigned cpu = 0; cpu < n_cpus; cpu++) {
                char name[64];
                FILE *p;

                snprintf(name, sizeof(name), "%s/cpu%u.pages", argv[1], cpu);
                p = fopen(name, "re");
                if (!p)
                        continue;
                for (unsigned i = 0; i < max_pages; i++) {
                        char page[PAGE_SIZE];
                        if (fread(page, 1, sizeof(page), p) != sizeof(page))
                                break;
                        if (datfile_add_page(f, cpu, page, 0) < 0)
                                return EXIT_FAILURE;
                }
                fclose(p);
        }
        closedir(d);
        /* A tool of the tests: it writes the file it is told to, over an earlier one. */
        if (datfile_finish(f, dir_fd, out_name, true, &st) < 0)
                return EXIT_FAILURE;
        free(out_name);
        close(dir_fd);
        dat_meta_free(m);
        return EXIT_SUCCESS;
}
