/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

#include <systemd/sd-event.h>

/*
 * One reader per CPU: it moves whole sub-buffer pages out of the CPU's trace_pipe_raw with
 * splice(2) when the kernel wakes it (buffer_percent decides when), and on reader_flush() read()s
 * the partially filled page, so that rare events still come out within the flush interval.
 */

typedef struct Reader Reader;

/* Called with n_pages whole sub-buffer pages; the memory is valid only during the call. */
typedef void (*ReaderHandler)(void *userdata, unsigned cpu, const void *pages, size_t n_pages, size_t page_size);

/* Takes ownership of fd (the CPU's trace_pipe_raw opened non-blocking). */
int reader_new(sd_event *event, int fd, unsigned cpu, size_t page_size, ReaderHandler handler, void *userdata,
               Reader **ret);
Reader *reader_free(Reader *r);

/* Reads what there is now, the partially filled page included; for the flush timer. */
int reader_flush(Reader *r);

/* Moves every full page there is now. */
int reader_drain(Reader *r);
