/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <trace-cmd/trace-cmd.h>

/*
 * The writing half of libtracecmd: the functions `trace-cmd record` itself calls to write its data
 * files. libtracecmd.so.1 exports them, but Debian's libtracecmd-dev ships only the reading half's
 * header (trace-cmd.h), so their declarations are here, as libtracecmd 1.3 (trace-cmd 3.1) defines
 * them. meson.build requires that version range; tests/integration/test-record.py checks the
 * files with Debian's `trace-cmd report`.
 */

struct tracecmd_output;
struct tracecmd_event_list;
struct tracecmd_option;

/* The ids of a data file's options (trace-cmd.dat(5); libtracecmd's private header names them):
 * those tpctl writes, and those client/datcheck.c checks before libtracecmd reads them. */
enum {
        TRACECMD_OPTION_DONE = 0,
        TRACECMD_OPTION_DATE = 1,
        TRACECMD_OPTION_CPUSTAT = 2,
        TRACECMD_OPTION_BUFFER = 3,
        TRACECMD_OPTION_TRACECLOCK = 4,
        TRACECMD_OPTION_UNAME = 5,
        TRACECMD_OPTION_HOOK = 6,
        TRACECMD_OPTION_OFFSET = 7,
        TRACECMD_OPTION_CPUCOUNT = 8,
        TRACECMD_OPTION_VERSION = 9,
        TRACECMD_OPTION_PROCMAPS = 10,
        TRACECMD_OPTION_TRACEID = 11,
        TRACECMD_OPTION_TIME_SHIFT = 12,
        TRACECMD_OPTION_GUEST = 13,
        TRACECMD_OPTION_TSC2NSEC = 14,
        TRACECMD_OPTION_HEADER_INFO = 16,
        TRACECMD_OPTION_FTRACE_EVENTS = 17,
        TRACECMD_OPTION_EVENT_FORMATS = 18,
        TRACECMD_OPTION_KALLSYMS = 19,
        TRACECMD_OPTION_PRINTK = 20,
        TRACECMD_OPTION_CMDLINES = 21,
        TRACECMD_OPTION_BUFFER_TEXT = 22,
};

/* Takes fd over: tracecmd_output_close() closes it. */
struct tracecmd_output *tracecmd_output_create_fd(int fd);
int tracecmd_output_set_trace_dir(struct tracecmd_output *handle, const char *tracing_dir);
int tracecmd_output_set_kallsyms(struct tracecmd_output *handle, const char *kallsyms);
int tracecmd_output_set_version(struct tracecmd_output *handle, int file_version);
int tracecmd_output_set_compression(struct tracecmd_output *handle, const char *compression);
int tracecmd_output_write_headers(struct tracecmd_output *handle, struct tracecmd_event_list *list);
struct tracecmd_option *tracecmd_add_option(struct tracecmd_output *handle, unsigned short id, int size,
                                            const void *data);
int tracecmd_write_cmdlines(struct tracecmd_output *handle);
int tracecmd_append_cpu_data(struct tracecmd_output *handle, int cpus, char *const *cpu_data_files);
void tracecmd_set_quiet(struct tracecmd_output *handle, bool set_quiet);
void tracecmd_output_close(struct tracecmd_output *handle);
