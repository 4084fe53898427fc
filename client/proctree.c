/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proctree.h"
#include "util.h"

/* A process's arguments beyond this are cut: the trace names processes, it does not archive them. */
#define CMDLINE_MAX 4096U

static int read_at(int dirfd, const char *name, char *buf, size_t size) {
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return -errno;
        n = read(fd, buf, size - 1);
        if (n < 0)
                return -errno;
        buf[n] = 0;
        return (int) n;
}

/* A name of /proc's that is a pid. */
static int parse_pid(const char *s) {
        char *end;
        long v;

        if (*s < '1' || *s > '9')
                return -1;
        errno = 0;
        v = strtol(s, &end, 10);
        return errno == 0 && *end == 0 && v > 0 && v <= INT32_MAX ? (int) v : -1;
}

/* "pid (comm) state ppid …": comm may hold spaces and parentheses, so the last ')' ends it. */
static int parse_stat(const char *text, ProcTask *t) {
        const char *open = strchr(text, '('), *close = strrchr(text, ')');
        size_t n;

        if (!open || !close || close < open || sscanf(close + 1, " %*c %d", &t->ppid) != 1)
                return -EINVAL;
        n = MIN((size_t) (close - open - 1), sizeof(t->comm) - 1);
        memcpy(t->comm, open + 1, n);
        t->comm[n] = 0;
        return 0;
}

static int tasks_add(ProcTask **tasks, size_t *n, size_t *cap, const ProcTask *t) {
        if (ARRAY_RESERVE(*tasks, *cap, *n + 1) < 0)
                return -ENOMEM;
        (*tasks)[(*n)++] = *t;
        return 0;
}

/* The threads of process pid (its own task left out: the process stands for it). */
static int read_threads(int piddir, const ProcTask *process, ProcTask **tasks, size_t *n, size_t *cap) {
        int fd = openat(piddir, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct dirent *de;
        DIR *d;
        int r = 0;

        if (fd < 0)
                return 0; /* gone */
        d = fdopendir(fd);
        if (!d) {
                safe_close(fd);
                return -ENOMEM;
        }
        while (r >= 0 && (de = readdir(d))) {
                char path[64], text[512];
                ProcTask t = { .tgid = process->tgid };

                t.tid = parse_pid(de->d_name);
                if (t.tid < 0 || t.tid == process->tid)
                        continue;
                (void) snprintf(path, sizeof(path), "%d/stat", t.tid);
                if (read_at(fd, path, text, sizeof(text)) < 0 || parse_stat(text, &t) < 0)
                        continue;       /* gone */
                t.ppid = process->ppid; /* the process's, whatever the thread's stat says */
                r = tasks_add(tasks, n, cap, &t);
        }
        closedir(d);
        return r;
}

int proc_tasks_read(const char *proc, ProcTask **ret, size_t *ret_n) {
        ProcTask *tasks = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        DIR *d = opendir(proc);
        char *cmdline = NULL;
        int r = 0;

        if (!d)
                return -errno;
        cmdline = malloc(CMDLINE_MAX + 1);
        if (!cmdline)
                r = -ENOMEM;
        while (r >= 0 && (de = readdir(d))) {
                ProcTask t = {};
                _cleanup_close_ int piddir = -1;
                char text[512];
                int len;

                t.tid = t.tgid = parse_pid(de->d_name);
                if (t.tid < 0)
                        continue;
                piddir = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (piddir < 0 || read_at(piddir, "stat", text, sizeof(text)) < 0 ||
                    parse_stat(text, &t) < 0)
                        continue; /* gone */
                len = read_at(piddir, "cmdline", cmdline, CMDLINE_MAX + 1);
                if (len > 0) {
                        if (cmdline[len - 1] != 0)
                                cmdline[len++] = 0; /* cut, or a process that rewrote its arguments */
                        t.cmdline = malloc((size_t) len);
                        if (!t.cmdline) {
                                r = -ENOMEM;
                                break;
                        }
                        memcpy(t.cmdline, cmdline, (size_t) len);
                        t.cmdline_len = (size_t) len;
                }
                r = tasks_add(&tasks, &n, &cap, &t);
                if (r < 0) {
                        free(t.cmdline);
                        break;
                }
                r = read_threads(piddir, &t, &tasks, &n, &cap);
        }
        closedir(d);
        free(cmdline);
        if (r < 0) {
                proc_tasks_free(tasks, n);
                return r;
        }
        *ret = tasks;
        *ret_n = n;
        return 0;
}

void proc_tasks_free(ProcTask *t, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(t[i].cmdline);
        free(t);
}
