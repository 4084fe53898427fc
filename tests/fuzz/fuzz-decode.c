/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: one input is one sub-buffer page of CPU 0, decoded with the formats recorded
 * under tests/data (every dataset's and the synthetic ones, which cover each field kind). Each
 * record is also rendered with its "print" text, as a stream that asked for it would get it, and
 * every line must be one valid JSON object of valid UTF-8 ending in a newline: anything else
 * aborts.
 *
 * The input is copied into a buffer of exactly its size, so that ASan sees any read past the
 * page. The formats are read from TPD_FUZZ_DATA_DIR (environment) or the source tree's
 * tests/data, once.
 */

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <traceevent/event-parse.h>

#include "decode.h"
#include "encode.h"
#include "fuzz.h"

static struct tep_handle *tep;
static Decoder *decoder;
static Batch *batch;

static const char *fuzz_comm(void *userdata, int pid, uint64_t ts) {
        /* Some pids have a name, one of them not UTF-8 and longer than a comm. */
        switch (pid & 3) {
        case 1:
                return "fuzz";
        case 2:
                return "\xff\"\\0123456789abcdefgh";
        default:
                return NULL;
        }
}

static uint64_t fuzz_missed(void *userdata, unsigned cpu, const uint64_t *stored) {
        return 42;
}

static void load_formats(const char *dir, bool header) {
        char path[PATH_MAX + 300];
        struct dirent *de;
        DIR *d = opendir(dir);

        if (!d)
                return;
        while ((de = readdir(d))) {
                size_t n = strlen(de->d_name);
                char system[256], *buf;
                const char *dot;
                size_t len;

                if (header && strcmp(de->d_name, "header_page") == 0) {
                        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                        buf = fuzz_read_file(path, &len);
                        if (buf && tep_parse_header_page(tep, buf, len, 8) < 0)
                                abort();
                        free(buf);
                        continue;
                }
                if (n < 8 || strcmp(de->d_name + n - 7, ".format") != 0)
                        continue;
                dot = strchr(de->d_name, '.');
                snprintf(system, sizeof(system), "%.*s", (int) (dot - de->d_name), de->d_name);
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                buf = fuzz_read_file(path, &len);
                if (!buf)
                        abort();
                /* The same event recorded in two datasets parses once; the second is refused. */
                (void) tep_parse_event(tep, buf, len, system);
                free(buf);
        }
        closedir(d);
}

static void setup(void) {
        const char *datadir = getenv("TPD_FUZZ_DATA_DIR") ?: TPD_FUZZ_DATA_DIR;
        DecoderCallbacks cb = { .comm = fuzz_comm, .missed = fuzz_missed };
        char path[PATH_MAX];
        struct dirent *de;
        DIR *d;

        tep = tep_alloc();
        if (!tep)
                abort();
        tep_set_long_size(tep, 8);
        tep_set_page_size(tep, 4096);
        /* Keep libtraceevent's parse warnings out of the fuzzer's output. */
        tep_set_loglevel(TEP_LOG_NONE);

        d = opendir(datadir);
        if (!d) {
                fprintf(stderr, "fuzz-decode: cannot open %s; set TPD_FUZZ_DATA_DIR\n", datadir);
                abort();
        }
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s", datadir, de->d_name);
                load_formats(path, strcmp(de->d_name, "synthetic") == 0);
        }
        closedir(d);
        if (!tep_find_event_by_name(tep, "sched", "sched_switch") ||
            !tep_find_event_by_name(tep, "tpdtest", "kinds")) {
                fprintf(stderr, "fuzz-decode: formats missing under %s\n", datadir);
                abort();
        }

        if (decoder_new(tep, &cb, &decoder) < 0)
                abort();
        batch = batch_new();
        if (!batch)
                abort();
}

static void check_line(const char *line, size_t len) {
        json_tokener *tok;
        json_object *o;

        if (len < 3 || line[len - 1] != '\n' || memchr(line, '\n', len - 1))
                abort();
        tok = json_tokener_new();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        o = json_tokener_parse_ex(tok, line, (int) (len - 1));
        if (!o || json_tokener_get_parse_end(tok) != len - 1 || !json_object_is_type(o, json_type_object)) {
                fprintf(stderr, "fuzz-decode: not one JSON object: %.*s\n", (int) len, line);
                abort();
        }
        json_object_put(o);
        json_tokener_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        uint8_t *page;
        int r;

        if (!decoder)
                setup();
        /* Pages are 4 KiB; a little more lets the fuzzer try lengths past the header's. */
        if (size > 8192)
                return 0;

        page = malloc(size ?: 1);
        if (!page)
                abort();
        memcpy(page, data, size);

        batch_reset(batch);
        r = decoder_decode_page(decoder, page, size, 0, batch);
        if (r < 0 && r != -EBADMSG)
                abort();
        if (r >= 0 && (size_t) r != batch->n_records)
                abort();

        for (size_t i = 0; i < batch->n_records; i++) {
                const Record *rec = &batch->records[i];

                check_line(batch->buf.data + rec->offset, rec->length);
                if (decoder_encode_print(decoder, batch, i) < 0)
                        abort();
                rec = &batch->records[i];
                if (rec->kind == RECORD_EVENT)
                        check_line(batch->buf.data + rec->print_offset, rec->print_length);
        }
        free(page);
        return 0;
}
