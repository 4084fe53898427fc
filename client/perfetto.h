/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A Perfetto trace (Perfetto's Trace protobuf, encoded by protobuf.c) written from one of two kinds
 * of input: the NDJSON records of docs/design.md §3 (convert's, by `tpctl replay`, and stream's, by
 * tpd), or Record's frames (record's: the kernel's pages, read by the decoder's plans of the formats
 * tpd sends, with no JSON made or read). Field numbers are those of Perfetto's
 * protos/perfetto/trace/; the messages written are in tests/data/perfetto-min.proto.
 */

typedef struct PerfettoWriter PerfettoWriter;

/* A writer to fd: writes the SystemInfo packet (uname() of this machine). */
int perfetto_writer_new(int fd, PerfettoWriter **ret);
/* A live capture's start (record and stream): the clock snapshot of tpd's reply to Stream or Record
 * (its ts, clock and offsets) and the process tree of the tasks alive now, read from /proc. */
int perfetto_writer_start(PerfettoWriter *w, json_object *reply);
/* One record of §3 of docs/design.md, a line of NDJSON (n bytes, read by flatjson.c): an event, a
 * loss, a clock record. A notice, and a line that is not a JSON object, are skipped. */
int perfetto_writer_add_line(PerfettoWriter *w, const char *line, size_t n);
/* Record's frames (include/tpd-protocol.h). A FILE frame's payload, "path\0content": an event's
 * format ("events/SYSTEM/EVENT/format") is read, other files are skipped; -EBADMSG for a format
 * libtraceevent cannot parse. */
int perfetto_writer_add_file(PerfettoWriter *w, const void *payload, size_t size);
/* A COMM frame: pid's name, for the process tree. */
int perfetto_writer_add_comm(PerfettoWriter *w, int pid, const char *comm, size_t len);
/* A LOST frame: count records lost on cpu. */
int perfetto_writer_add_lost(PerfettoWriter *w, unsigned cpu, uint64_t count);
/* A PAGE frame: each record of the page as an event of cpu's bundle; a record of an event without a
 * format is counted as lost, like the line tpd would have made of it; the page's loss flags are
 * not (the LOST frames count them). */
int perfetto_writer_add_page(PerfettoWriter *w, unsigned cpu, const void *page, size_t size);
/* Writes the bundles still open, the process tree and the loss statistics. */
int perfetto_writer_finish(PerfettoWriter *w);
PerfettoWriter *perfetto_writer_free(PerfettoWriter *w);
