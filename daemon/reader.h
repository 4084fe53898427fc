/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

/*
 * One reader per CPU: it moves whole sub-buffer pages out of the CPU's trace_pipe_raw with
 * splice(2) when the kernel wakes it (buffer_percent decides when), and on reader_flush() read()s
 * the partially filled page, so that rare events still come out within the flush interval.
 *
 * Whatever comes out of the fd is one byte stream of whole pages: a short read or a splice that
 * moved part of a page leaves the fragment in the reader until the rest arrives, so the handler
 * only ever sees whole, aligned pages.
 */

typedef struct Reader Reader;

/* Called with n_pages whole sub-buffer pages; the memory is valid only during the call. */
typedef void (*ReaderHandler)(void *userdata, unsigned cpu, const void *pages, size_t n_pages,
                              size_t page_size);

typedef struct ReaderStats {
        uint64_t pages;         /* handed to the handler */
        uint64_t dropped_bytes; /* spliced but lost when reading them back failed */
} ReaderStats;

/* Takes ownership of fd (the CPU's trace_pipe_raw opened non-blocking). */
int reader_new(sd_event *event, int fd, unsigned cpu, size_t page_size, ReaderHandler handler,
               void *userdata, Reader **ret);
Reader *reader_free(Reader *r);

/* Reads what there is now, the partially filled page included; for the flush timer. */
int reader_flush(Reader *r);

/* Moves every full page there is now. */
int reader_drain(Reader *r);

/* Moves the full pages there are now, up to max_pages (splice alone: the page the kernel is still
 * writing stays). Returns the pages moved, or a negative errno (logged). */
int reader_drain_full(Reader *r, size_t max_pages);

/* Reads up to max_pages of what the buffer holds, full pages and the partial one: for a CPU that
 * went offline, whose buffer no longer wakes anyone. Returns 1 once the buffer is empty (or has
 * no pages at all: -ENODEV from the kernel), 0 when max_pages were read and more may be left, or
 * a negative errno (logged). */
int reader_drain_all(Reader *r, size_t max_pages);

/* Starts or stops watching the fd. A reader that stopped itself because its fd polled ready with
 * nothing to read (a CPU without a ring buffer polls EPOLLERR forever) watches again after
 * reader_set_polling(r, true); it stops again at once if the fd still misbehaves. */
int reader_set_polling(Reader *r, bool polling);
bool reader_is_polling(Reader *r);

/* With partial, a wake-up that finds no full page reads the partially filled one: for a quiet
 * tpd, which sets buffer_percent to 0 so that the first record wakes it instead of a timer. Call
 * with true after setting buffer_percent to 0: the fd is polled again under the new value. (Back
 * to false, the fd stays on the kernel's wait for any data until its next wake-up; the kernel
 * wakes that wait too when the new watermark is reached.) */
int reader_set_partial(Reader *r, bool partial);

const ReaderStats *reader_stats(Reader *r);
