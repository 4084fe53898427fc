/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

/*
 * The tasks alive now, as /proc shows them to the calling user: what a Perfetto trace's process
 * tree starts from (perfetto.c), before the records' forks and renames update it.
 */

typedef struct ProcTask {
        int tid;
        int tgid;      /* the process the task is a thread of (tid == tgid: the process itself) */
        int ppid;      /* the process's parent */
        char comm[64]; /* the kernel's name of the task (a kernel thread's may be longer than 15) */
        char *cmdline; /* of a process: its arguments, each ending in NUL; NULL when it has none
                        * (a kernel thread, a zombie) or for a thread */
        size_t cmdline_len;
} ProcTask;

/* Every task under proc ("/proc"): processes and their threads. Tasks that exit while they are read
 * are left out. 0 or a negative errno (-ENOMEM, or proc cannot be read). */
int proc_tasks_read(const char *proc, ProcTask **ret, size_t *ret_n);

void proc_tasks_free(ProcTask *t, size_t n);
