/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <json-c/json.h>

#include "options.h"

/*
 * `tpctl convert IN OUT`: a capture (a trace-cmd data file or tpctl's NDJSON, read by replay.c as
 * `tpctl replay` reads it) written as a Perfetto trace (Perfetto's Trace protobuf, encoded by
 * protobuf.c). Field numbers are those of Perfetto's protos/perfetto/trace/; the messages written
 * are in tests/data/perfetto-min.proto.
 */

typedef struct PerfettoWriter PerfettoWriter;

/* A writer to fd: writes the SystemInfo packet (uname() of this machine). */
int perfetto_writer_new(int fd, PerfettoWriter **ret);
/* A live capture's start (record and stream): the clock snapshot of tpd's reply to Stream (its ts,
 * clock and offsets) and the process tree of the tasks alive now, read from /proc. */
int perfetto_writer_start(PerfettoWriter *w, json_object *reply);
/* One record of §3 of docs/design.md, a line of NDJSON (n bytes, read by flatjson.c): an event, a
 * loss, a clock record. A notice, and a line that is not a JSON object, are skipped. */
int perfetto_writer_add_line(PerfettoWriter *w, const char *line, size_t n);
/* Writes the bundles still open, the process tree and the loss statistics. */
int perfetto_writer_finish(PerfettoWriter *w);
PerfettoWriter *perfetto_writer_free(PerfettoWriter *w);

/* `tpctl convert IN OUT`. Returns the exit status. */
int convert_verb(const CommonOptions *c, char **args, size_t n);
