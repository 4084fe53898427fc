/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The NDJSON lines tpctl reads: tpd's stream (lines.c, export.c) and a capture file (replay.c).
 * One reader, and one parser of a line's head: only the fixed start of a line of tpd is read,
 * {"ts":N,"cpu":N,"event":… (docs/design.md §3), so a line costs a few comparisons, not a JSON parse.
 */

/* Lines of a file, each at most max bytes (the newline not counted), in a buffer that grows up to
 * that: a file of one endless line costs no more. */
typedef struct LineReader {
        int fd;
        size_t max;
        char *buf;
        size_t cap;
        size_t start, end; /* buf[start, end): read, not yet returned */
        size_t scanned;    /* buf[start, scanned) holds no newline */
        bool eof;
} LineReader;

/* Starts reading fd, with head (n_head bytes) read of it already. 0 or -ENOMEM. */
int line_reader_init(LineReader *r, int fd, size_t max, const void *head, size_t n_head);
void line_reader_done(LineReader *r);

/* One read() of more of fd: the bytes read, 0 at its end, -EAGAIN when a non-blocking fd has
 * nothing, -E2BIG when the line begun is already longer than max, or another negative errno. */
ssize_t line_reader_fill(LineReader *r);

/* The next line of what was read, its newline included (none at the end of the file), in *ret
 * (valid until the next call): 1, 0 when no line is complete yet, or -E2BIG for a line longer
 * than max. */
int line_reader_next(LineReader *r, const char **ret, size_t *ret_len);

/* Forgets what was read of the line begun: after -E2BIG, to go on. */
void line_reader_drop(LineReader *r);

/* The next line of a blocking fd, reading as needed: 1, 0 after the last line, -E2BIG for a line
 * longer than max, or another negative errno. */
int line_next(LineReader *r, const char **ret, size_t *ret_len);

/* The head of one of tpd's lines: {"ts":N,"cpu":N,"event":"S:E",…},
 * {"ts":N,"cpu":N,"lost":N,"cause":"C"}, {"ts":N,"clock":…} or {"ts":N,"notice":…}. */
typedef struct LineHead {
        bool has_ts;
        uint64_t ts;
        const char *after_ts; /* where the line goes on after the ts */
        bool has_cpu;
        uint64_t cpu;
        bool event;       /* an event record */
        const char *name; /* its event's name, if the line has its closing quote */
        size_t name_len;
        bool has_pid; /* after the name: its "pid", and "comm" (as JSON has it, escapes kept) */
        uint64_t pid;
        const char *comm;
        size_t comm_len;
        bool lost; /* a lost record */
        uint64_t n_lost;
        const char *cause; /* its cause, if the line has its closing quote */
        size_t cause_len;
        bool clock; /* a clock record */
        bool sync;  /* tpd's "sync" notice (a SYNC frame's answer) */
} LineHead;

/* Reads the head of a line of n bytes; what is not there is left unset (false, 0, NULL). */
void line_head_parse(const char *line, size_t n, LineHead *ret);
