/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/*
 * A trace-cmd data file being written: the pages of each CPU go to a file of their own in a private
 * directory next to the output, as `trace-cmd record` does, and datfile_finish() writes the data
 * file from them, there, then moves it into place, with
 * libtracecmd: headers, event formats, kallsyms and printk formats from a tracing directory made
 * of the files tpd sent, options (clock, losses per CPU, uname, version), command lines, then the
 * pages.
 */

typedef struct DatMeta DatMeta;
typedef struct DatFile DatFile;

/* What every file of a recording shares: tpd's files, the command names and kallsyms, kept in a
 * private directory (".tpctl-record-XXXXXX", 0700) made in dir_fd, the output's directory, until
 * dat_meta_free() removes it. */
int dat_meta_new(int dir_fd, unsigned n_cpus, size_t page_size, int file_version, DatMeta **ret);
DatMeta *dat_meta_free(DatMeta *m);
/* A FILE frame's payload: "path\0content". The path must be one tpd sends (checked). */
int dat_meta_add_file(DatMeta *m, const void *payload, size_t size);
int dat_meta_add_comm(DatMeta *m, int pid, const char *comm, size_t len);
/* Copies /proc/kallsyms as the caller may read it, or none: trace-cmd reads an empty one as none. */
int dat_meta_set_kallsyms(DatMeta *m, int enabled);
/* Bytes the headers of a file will take at most, before its pages. */
uint64_t dat_meta_header_size(const DatMeta *m);

int datfile_new(DatMeta *meta, DatFile **ret);
/* Appends a page of cpu (page_size bytes) holding records records. */
int datfile_add_page(DatFile *f, unsigned cpu, const void *page, uint32_t records);
/* Notes the losses of cpu for the file's per-CPU statistics. */
void datfile_note_lost(DatFile *f, unsigned cpu, uint64_t overrun, uint64_t other);
uint64_t datfile_data_size(const DatFile *f);
/* Writes the data file, moves it to name in dir_fd (see capdir_move() for replace: -EEXIST when the
 * name exists and replace is false), removes the page files and returns the file's stat. Frees f. */
int datfile_finish(DatFile *f, int dir_fd, const char *name, bool replace, struct stat *ret_st);
/* Removes what was written. Frees f. */
void datfile_abort(DatFile *f);
