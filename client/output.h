/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

/* Pretty JSON of o and a newline on stdout. */
void print_json(json_object *o);

/* JSON of o on one line (short) or indented (pretty), and a newline, on stdout. */
void print_json_as(json_object *o, bool pretty);

/* Text from tpd for a terminal: control bytes and bytes outside printable ASCII as \xNN, a
 * backslash as \\; cut with "..." at 4 KiB. Valid until 16 more calls. */
const char *output_escape(const char *s);

/* --no-legend: tables without their header line. */
extern bool output_legend;

/* Replies' parameters as text, by method: ListEvents, DescribeEvent, GetStatus. */
void print_list(json_object *params);
void print_describe(json_object *params);
void print_status(json_object *params);
