/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * How tpctl shows replies as text. Every function accepts replies of any shape: what is missing or of
 * the wrong type prints as "-" or as an empty table, never as a crash.
 */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"
#include "terminal.h"
#include "util.h"

bool output_legend = true;

#define TABLE_COLUMNS_MAX 8

static size_t array_length(json_object *a) {
        return json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
}

/* Strings in replies come from other clients (filters, event names of user_events, comms): their
 * control bytes and bytes outside printable ASCII print as \xNN and a backslash as \\, so that no
 * terminal escape reaches the terminal. The text lives in a ring of buffers, enough for one table
 * row; longer text is cut with "...". */
#define CELL_RING 16
#define CELL_MAX 4096

const char *output_escape(const char *s) {
        static char ring[CELL_RING][CELL_MAX];
        static unsigned next;
        char *buf = ring[next++ % CELL_RING];
        size_t n = 0;

        for (; *s; s++) {
                unsigned char c = (unsigned char) *s;

                if (n + 8 > CELL_MAX) {
                        memcpy(buf + n, "...", 3);
                        n += 3;
                        break;
                }
                if (c == '\\')
                        n += (size_t) snprintf(buf + n, CELL_MAX - n, "\\\\");
                else if (c < 0x20 || c >= 0x7f)
                        n += (size_t) snprintf(buf + n, CELL_MAX - n, "\\x%02x", c);
                else
                        buf[n++] = (char) c;
        }
        buf[n] = 0;
        return buf;
}

/* A member of a reply as text: booleans as yes/no, absent and null as "-", numbers as sent. */
static const char *cell(json_object *o, const char *key) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || !v)
                return "-";
        if (json_object_is_type(v, json_type_boolean))
                return json_object_get_boolean(v) ? "yes" : "no";
        return output_escape(json_object_get_string(v));
}

void print_json(json_object *o) {
        print_json_as(o, true);
}

void print_json_as(json_object *o, bool pretty) {
        puts(json_object_to_json_string_ext(o, pretty ? JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE
                                                      : JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE));
}

typedef struct Column {
        const char *header;
        const char *key;
        bool right; /* numbers line up on their last digit */
} Column;

static void print_row(const char *indent, const Column *cols, size_t n, const char *const *cells,
                      const size_t *width) {
        fputs(indent, stdout);
        for (size_t c = 0; c < n; c++) {
                /* No padding after a left-aligned last column: trailing blanks only annoy grep. */
                int w = c + 1 == n && !cols[c].right ? 0 : (int) width[c];

                printf("%s%*s", c > 0 ? "  " : "", cols[c].right ? w : -w, cells[c]);
        }
        fputc('\n', stdout);
}

/* One row per object of rows, one column per key; widths fit the longest cell. */
static void print_table(const char *indent, json_object *rows, const Column *cols, size_t n) {
        const char *cells[TABLE_COLUMNS_MAX];
        size_t width[TABLE_COLUMNS_MAX];

        if (n > TABLE_COLUMNS_MAX)
                abort();
        for (size_t c = 0; c < n; c++) {
                cells[c] = cols[c].header;
                width[c] = output_legend ? strlen(cols[c].header) : 0;
        }
        for (size_t i = 0; i < array_length(rows); i++) {
                json_object *row = json_object_array_get_idx(rows, i);

                for (size_t c = 0; c < n; c++)
                        width[c] = MAX(width[c], strlen(cell(row, cols[c].key)));
        }

        if (output_legend)
                print_row(indent, cols, n, cells, width);
        for (size_t i = 0; i < array_length(rows); i++) {
                json_object *row = json_object_array_get_idx(rows, i);

                for (size_t c = 0; c < n; c++)
                        cells[c] = cell(row, cols[c].key);
                print_row(indent, cols, n, cells, width);
        }
}

void print_list(json_object *p) {
        json_object *events = json_object_object_get(p, "events");

        for (size_t i = 0; i < array_length(events); i++) {
                json_object *e = json_object_array_get_idx(events, i);
                bool enabled = json_object_get_boolean(json_object_object_get(e, "enabled"));

                printf("%s%s%s%s\n", cell(e, "name"),
                       enabled ? terminal_color(STDOUT_FILENO, ANSI_GREEN) : "", enabled ? " (enabled)" : "",
                       enabled ? terminal_color(STDOUT_FILENO, ANSI_NORMAL) : "");
        }
}

void print_describe(json_object *p) {
        static const Column cols[] = {
                { "TYPE", "type" },
                { "NAME", "name" },
                { "SIZE", "size", true },
                { "SIGNED", "signed" },
        };

        printf("Name:      %s\n", cell(p, "name"));
        printf("ID:        %s\n", cell(p, "id"));
        printf("Fields:\n");
        print_table("    ", json_object_object_get(p, "fields"), cols, ELEMENTSOF(cols));
        printf("Print fmt: %s\n", cell(p, "print_fmt"));
}

/* "0,1001" from an array of uids; "-" when empty. */
static json_object *uid_list(json_object *a) {
        char buf[256] = "";
        size_t len = 0;

        for (size_t i = 0; i < array_length(a) && len < sizeof(buf) - 16; i++)
                len += (size_t) snprintf(buf + len, sizeof(buf) - len, "%s%lld", i > 0 ? "," : "",
                                         (long long) json_object_get_int64(json_object_array_get_idx(a, i)));
        return json_object_new_string(len > 0 ? buf : "-");
}

/* Events with their holders as text cells; the reply keeps the arrays. */
static json_object *events_with_holders(json_object *events) {
        json_object *rows = json_object_new_array();

        for (size_t i = 0; rows && i < array_length(events); i++) {
                json_object *e = json_object_array_get_idx(events, i), *row = json_object_new_object(), *v;

                if (!row)
                        break;
                json_object_object_foreach(e, key, value)
                        json_object_object_add(row, key, json_object_get(value));
                json_object_object_add(row, "pinned by", uid_list(json_object_object_get(e, "pin_uids")));
                v = uid_list(json_object_object_get(e, "stream_uids"));
                /* tpd's own hold, for streams that follow pids. */
                if (json_object_get_boolean(json_object_object_get(e, "internal"))) {
                        const char *l = json_object_get_string(v);
                        char buf[300];

                        snprintf(buf, sizeof(buf), "%s%stpd (follow)", streq(l, "-") ? "" : l,
                                 streq(l, "-") ? "" : ",");
                        json_object_put(v);
                        v = json_object_new_string(buf);
                }
                json_object_object_add(row, "streams of", v);
                if (json_object_object_get_ex(e, "filter_uid", &v))
                        json_object_object_add(row, "filter by", json_object_get(v));
                json_object_array_add(rows, row);
        }
        return rows;
}

/* A loss count, highlighted when not 0 (on a terminal). */
static const char *lost_cell(json_object *lost, const char *key) {
        static char ring[8][64]; /* one printf() takes up to five of them */
        static unsigned next;
        const char *v = cell(lost, key);
        char *buf = ring[next++ % ELEMENTSOF(ring)];

        if (streq(v, "0") || streq(v, "-") || !terminal_colors(STDOUT_FILENO))
                return v;
        snprintf(buf, sizeof(ring[0]), "%s%.20s%s", ANSI_YELLOW, v, ANSI_NORMAL);
        return buf;
}

void print_status(json_object *p) {
        static const Column cpu_cols[] = {
                { "CPU", "cpu", true },         { "ONLINE", "online" },   { "ENTRIES", "entries", true },
                { "OVERRUN", "overrun", true }, { "READ", "read", true }, { "WRITTEN", "written", true },
                { "DROPPED", "dropped", true },
        };
        static const Column event_cols[] = {
                { "EVENT", "name" },
                { "PINNED BY", "pinned by" },
                { "STREAMS", "streams", true },
                { "STREAM UIDS", "streams of" },
                { "FILTER BY", "filter by", true },
                { "FILTER", "filter" },
        };
        static const Column conn_cols[] = {
                { "UID", "uid", true },          { "PID", "pid", true },
                { "STREAMING", "streaming" },    { "DELIVERED", "delivered", true },
                { "LOST", "lost_client", true },
        };
        json_object *rows;
        json_object *lost = json_object_object_get(p, "lost");
        json_object *loop = json_object_object_get(p, "loop");
        json_object *events = json_object_object_get(p, "events");

        printf("Version:        %s\n", cell(p, "version"));
        printf("Instance:       %s\n", cell(p, "instance"));
        printf("Clock:          %s\n", cell(p, "clock"));
        printf("Buffer size:    %s KiB per CPU\n", cell(p, "buffer_size_kb"));
        printf("Flush interval: %s ms\n", cell(p, "flush_interval_ms"));
        printf("Clients:        %s\n", cell(p, "clients"));
        printf("Streams:        %s\n", cell(p, "streams"));
        printf("Delivered:      %s\n", cell(p, "delivered"));
        printf("Lost:           %s overrun, %s dropped, %s client, %s unknown; %s pages not decoded\n",
               lost_cell(lost, "overrun"), lost_cell(lost, "dropped"), lost_cell(lost, "client"),
               lost_cell(lost, "unknown"), lost_cell(lost, "decode_pages"));
        if (loop)
                printf("Loop:           longest dispatch %.1f ms (most CPU of one %.1f ms), %s of %s over "
                       "10 ms\n",
                       (double) json_object_get_int64(json_object_object_get(loop, "max_usec")) / 1000,
                       (double) json_object_get_int64(json_object_object_get(loop, "max_cpu_usec")) / 1000,
                       cell(loop, "slow"), cell(loop, "dispatches"));
        /* Enable does not wait for the disk: a failing save of the pins shows here. */
        if (json_object_object_get(p, "state_error"))
                printf("State:          %sNOT SAVED: %s (pins made since will not survive a restart)%s\n",
                       terminal_color(STDOUT_FILENO, ANSI_RED), cell(p, "state_error"),
                       terminal_color(STDOUT_FILENO, ANSI_NORMAL));

        fputc('\n', stdout);
        print_table("", json_object_object_get(p, "cpus"), cpu_cols, ELEMENTSOF(cpu_cols));
        fputc('\n', stdout);
        if (array_length(events) > 0) {
                rows = events_with_holders(events);
                print_table("", rows, event_cols, ELEMENTSOF(event_cols));
                json_object_put(rows);
        } else
                printf("No events enabled.\n");
        if (array_length(json_object_object_get(p, "connections")) > 0) {
                fputc('\n', stdout);
                print_table("", json_object_object_get(p, "connections"), conn_cols, ELEMENTSOF(conn_cols));
        }
}
