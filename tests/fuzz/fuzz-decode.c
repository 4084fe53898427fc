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

#include "core/decode.h"
#include "core/encode.h"
#include "fuzz-formats.h"
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

static void setup(void) {
        DecoderCallbacks cb = { .comm = fuzz_comm, .missed = fuzz_missed };
        const char *datadir = getenv("TPD_FUZZ_DATA_DIR") ?: TPD_FUZZ_DATA_DIR;

        tep = fuzz_load_formats("fuzz-decode");
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
                /* The readable values ("sym") read the record's fields through the print format. */
                if (decoder_encode_variant(decoder, batch, i, DECODER_VARIANT_SYM | DECODER_VARIANT_PRINT) <
                    0)
                        abort();
                rec = &batch->records[i];
                if (rec->kind == RECORD_EVENT)
                        check_line(batch->buf.data + rec->print_offset, rec->print_length);
        }
        free(page);
        return 0;
}
