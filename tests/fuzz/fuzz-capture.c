/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: one input is one whole capture file, replayed as `tpctl replay FILE` replays it
 * (client/replay.c): a trace-cmd data file (version 6 or 7, read by libtracecmd, decoded by tpd's
 * decoder) or NDJSON of tpctl stream. Each input is replayed twice, plainly and with --print.
 * libtracecmd reads files by name: the input is written to a memfd and named /proc/self/fd/N. The
 * data file is read in this process (ReplayOptions.in_process), so that a crash is seen, not turned
 * into an error by replay's child.
 *
 * Oracle, besides the sanitizers: what replay writes to standard output (a memfd here) is lines of
 * strict JSON objects of valid UTF-8; each stays the same JSON once escaped for a terminal
 * (client/terminal.h) and then holds no control byte; its messages are printable ASCII lines.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <json-c/json.h>

#include "fuzz.h"
#include "message.h"
#include "replay.h"
#include "terminal.h"

/* LeakSanitizer's suppressions for this program: libtracecmd 1.3 leaks on the error paths of damaged
 * files (the buffer of a compressed block that does not uncompress, tracecmd_uncompress_block();
 * a section it gives up reading) and always leaks the clock's name (tracecmd_parse_trace_clock()'s
 * sscanf("%ms"): the fast unwinder stops in libc, hence the sscanf entry; nothing else in this
 * program makes sscanf allocate). tpctl reads a data file in a child process that exits. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
        return "leak:libtracecmd.so\nleak:__isoc99_vsscanf\n";
}

/* A data file's records and their JSON grow with its size: keep runs short. */
#define CAPTURE_MAX (256U * 1024U)

static int in_fd = -1, out_fd = -1;
static char *out_buf;
static size_t out_cap;

static void setup(void) {
        in_fd = memfd_create("fuzz-capture-in", MFD_CLOEXEC);
        out_fd = memfd_create("fuzz-capture-out", MFD_CLOEXEC);
        if (in_fd < 0 || out_fd < 0)
                abort();
        /* replay writes to fd 1; libFuzzer and the sanitizers report on fd 2. */
        if (dup2(out_fd, STDOUT_FILENO) < 0)
                abort();
}

static json_object *parse_strict(const char *s, size_t len) {
        json_tokener *tok = json_tokener_new();
        json_object *o;

        if (!tok)
                abort();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        o = json_tokener_parse_ex(tok, s, (int) len);
        if (o && (json_tokener_get_parse_end(tok) != len || !json_object_is_type(o, json_type_object))) {
                json_object_put(o);
                o = NULL;
        }
        json_tokener_free(tok);
        return o;
}

static void check_line(const char *line, size_t len) {
        json_object *o = parse_strict(line, len), *e;
        char *esc = malloc(6 * len + 1);
        size_t n = 0;

        if (!o || !esc) {
                fprintf(stderr, "fuzz-capture: not one strict JSON object: %.*s\n", (int) len, line);
                abort();
        }
        for (size_t i = 0; i < len;) {
                size_t safe = terminal_json_safe(line + i, len - i), used;

                memcpy(esc + n, line + i, safe);
                n += safe;
                i += safe;
                if (i < len) {
                        n += terminal_json_escape(line + i, len - i, esc + n, &used);
                        i += used;
                }
        }
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) esc[i];
                if (c < 0x20 || c == 0x7f || (c == 0xc2 && i + 1 < n && (unsigned char) esc[i + 1] < 0xa0))
                        abort();
        }
        e = parse_strict(esc, n);
        if (!e || !json_object_equal(o, e)) {
                fprintf(stderr, "fuzz-capture: escaped for a terminal, not the same JSON: %.*s\n", (int) n,
                        esc);
                abort();
        }
        json_object_put(e);
        json_object_put(o);
        free(esc);
}

static void check_output(void) {
        off_t size = lseek(out_fd, 0, SEEK_CUR);
        size_t len = 0;

        if (size < 0)
                abort();
        if ((size_t) size > out_cap) {
                out_buf = realloc(out_buf, (size_t) size);
                if (!out_buf)
                        abort();
                out_cap = (size_t) size;
        }
        while (len < (size_t) size) {
                ssize_t k = pread(out_fd, out_buf + len, (size_t) size - len, (off_t) len);
                if (k <= 0)
                        abort();
                len += (size_t) k;
        }
        for (size_t start = 0; start < len;) {
                const char *nl = memchr(out_buf + start, '\n', len - start);
                size_t end = nl ? (size_t) (nl - out_buf) : len;

                check_line(out_buf + start, end - start);
                start = end + 1;
        }
        if (ftruncate(out_fd, 0) < 0 || lseek(out_fd, 0, SEEK_SET) < 0)
                abort();
}

static void check_messages(const char *text, size_t len) {
        for (size_t i = 0; i < len; i++)
                if ((text[i] < 0x20 && text[i] != '\n') || (unsigned char) text[i] >= 0x7f) {
                        fprintf(stderr, "fuzz-capture: a message not of printable ASCII: %.*s\n", (int) len,
                                text);
                        abort();
                }
}

static void replay(const char *path, const ReplayOptions *o) {
        FILE *saved = stderr, *messages;
        char *text = NULL;
        size_t len = 0;

        /* Messages go through stdio's stderr, which is swapped; fd 2 stays the sanitizers'. */
        messages = open_memstream(&text, &len);
        if (!messages)
                abort();
        stderr = messages;
        (void) replay_file(path, o);
        stderr = saved;
        fclose(messages);
        check_messages(text, len);
        free(text);
        check_output();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char path[64];

        if (size > CAPTURE_MAX)
                return 0;
        if (in_fd < 0)
                setup();
        if (ftruncate(in_fd, 0) < 0 || pwrite(in_fd, data, size, 0) != (ssize_t) size)
                abort();
        snprintf(path, sizeof(path), "/proc/self/fd/%d", in_fd);

        replay(path, &(ReplayOptions){ .in_process = true });
        replay(path, &(ReplayOptions){ .in_process = true, .print = true });
        return 0;
}
