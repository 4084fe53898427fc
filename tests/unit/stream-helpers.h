/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * What test-stream and test-stream-losses share: records with a line of fixed text, streams, a
 * filter set as a call sets one, the formats and pages of a dataset of tests/data, and queues
 * written out through a real socketpair().
 */

#include <traceevent/event-parse.h>

#include "core/encode.h"
#include "core/queue.h"
#include "core/stream.h"
#include "tpd-test.h"

#define PAGE 4096U

/* The directory of the datasets, from the command line. */
extern const char *test_datadir;

typedef struct Pair {
        int w, r;
} Pair;

/* A nonblocking socketpair; sndbuf > 0 sets the writing end's send buffer. */
Pair pair_new(int sndbuf);
void pair_close(Pair *p);
size_t drain(int fd, JsonBuf *out);
void flush_queue(Queue *q, JsonBuf *out);

#define ASSERT_OUT(out, text) ASSERT_MEM_EQ((out)->data, (out)->len, text, strlen(text))

size_t add_event(Batch *b, unsigned cpu, uint16_t id, int32_t pid, uint64_t ts, const char *text);
size_t add_line(Batch *b, unsigned cpu, uint64_t ts);
Stream *stream_make(StreamMode mode, unsigned n_cpus, size_t max_bytes);
int set_filter(Stream *s, struct tep_handle *tep, const char *filter, const char *event,
               SelectionError *ret_error);

/* The sched_switch and getppid formats of dataset NAME, and the pages of one of its CPU files. */
struct tep_handle *load_tep(const char *name);
uint8_t *load_pages(const char *name, const char *file, size_t *ret_n);
