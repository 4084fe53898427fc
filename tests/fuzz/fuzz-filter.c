/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target for the filter grammar (core/filter.c), over every format recorded under
 * tests/data. The first byte picks the event (byte / 2, modulo the number of events, in id order)
 * and the target (bit 0: kernel or stream); the rest is the filter text. Oracles:
 *
 *   - refused: -EINVAL with a message of printable ASCII only;
 *   - accepted: the canonical text parses to itself, for both targets where it is valid, and a
 *     stream filter's canonical text is accepted by libtraceevent's tep_filter_add_filter_str();
 *     what the kernel takes a stream takes too, but for '~', '&', negative numbers and ',' in strings;
 *   - ASan/UBSan and LeakSanitizer throughout, libtraceevent included.
 */

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "core/filter.h"
#include "fuzz-formats.h"
#include "fuzz.h"

static struct tep_handle *tep;
static struct tep_event **events;
static size_t n_events;

static void setup(void) {
        const char *datadir = getenv("TPD_FUZZ_DATA_DIR") ?: TPD_FUZZ_DATA_DIR;

        tep = fuzz_load_formats("fuzz-filter");
        events = tep_list_events(tep, TEP_EVENT_SORT_ID);
        for (n_events = 0; events && events[n_events]; n_events++)
                ;
        if (n_events < 10) {
                fprintf(stderr, "fuzz-filter: formats missing under %s\n", datadir);
                abort();
        }
}

static void check_message(const char *msg) {
        if (!msg)
                abort();
        for (const char *p = msg; *p; p++)
                if (*p < 0x20 || *p >= 0x7f)
                        abort();
}

/* Canonical text is a fixed point, for the target it was made for. */
static void check_fixed_point(struct tep_event *e, const char *canonical, FilterTarget target) {
        char *again = NULL, *msg = NULL;

        if (filter_canonicalize(e, canonical, target, &again, &msg) != 0 || strcmp(again, canonical) != 0) {
                fprintf(stderr, "fuzz-filter: '%s' is not canonical (%s)\n", canonical, again ?: msg);
                abort();
        }
        free(again);
}

static void check_libtraceevent(struct tep_event *e, const char *canonical) {
        struct tep_event_filter *f = tep_filter_alloc(tep);
        enum tep_errno err;
        char *text = NULL;

        if (!f || asprintf(&text, "%s/%s:%s", e->system, e->name, canonical) < 0)
                abort();
        err = tep_filter_add_filter_str(f, text);
        if (err != TEP_ERRNO__SUCCESS) {
                char buf[256];
                tep_filter_strerror(f, err, buf, sizeof(buf));
                fprintf(stderr, "fuzz-filter: libtraceevent refused '%s': %s\n", canonical, buf);
                abort();
        }
        free(text);
        tep_filter_free(f);
}

static bool streq_null(const char *a, const char *b) {
        return a == b || (a && b && strcmp(a, b) == 0);
}

/* A stream's one parse (filter_canonicalize_stream()) says what the kernel's and the stream's
 * parses say: the kernel's error first, then the stream's, with their messages and text. */
static void check_one_parse(struct tep_event *e, const char *text) {
        char *kernel_msg = NULL, *stream = NULL, *stream_msg = NULL, *one = NULL, *one_msg = NULL;
        int kr, sr, r;

        kr = filter_canonicalize(e, text, FILTER_KERNEL, NULL, &kernel_msg);
        sr = filter_canonicalize(e, text, FILTER_STREAM, &stream, &stream_msg);
        r = filter_canonicalize_stream(e, text, &one, &one_msg);
        if (kr == -ENOMEM || sr == -ENOMEM || r == -ENOMEM)
                abort();
        if (kr < 0) {
                if (r != -EINVAL || one || !streq_null(one_msg, kernel_msg))
                        abort();
        } else if (sr < 0) {
                if (r != -EOPNOTSUPP || one || !streq_null(one_msg, stream_msg))
                        abort();
        } else if (r != 0 || one_msg || !streq_null(one, stream))
                abort();
        free(kernel_msg);
        free(stream);
        free(stream_msg);
        free(one);
        free(one_msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *text, *canonical = NULL, *msg = NULL;
        FilterTarget target;
        struct tep_event *e;
        int r;

        if (!tep)
                setup();
        if (size < 1)
                return 0;
        e = events[(data[0] >> 1) % n_events];
        target = data[0] & 1 ? FILTER_STREAM : FILTER_KERNEL;

        /* Exactly the size of the text, so that ASan sees a read past it. */
        text = malloc(size);
        if (!text)
                abort();
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;

        check_one_parse(e, text);
        r = filter_canonicalize(e, text, target, &canonical, &msg);
        if (r == -EINVAL) {
                if (canonical)
                        abort();
                check_message(msg);
                free(msg);
        } else if (r == 0) {
                if (msg || !canonical || strlen(canonical) >= 4096)
                        abort();
                check_fixed_point(e, canonical, target);
                if (target == FILTER_STREAM)
                        check_libtraceevent(e, canonical);
                else {
                        /* What the kernel takes, a stream takes too unless it uses '~' or '&'. */
                        char *stream = NULL;

                        r = filter_canonicalize(e, canonical, FILTER_STREAM, &stream, &msg);
                        if (r == 0) {
                                check_fixed_point(e, stream, FILTER_STREAM);
                                check_libtraceevent(e, stream);
                                free(stream);
                        } else {
                                if (r != -EINVAL || (!strstr(msg, "only supported in kernel filters") &&
                                                     !strstr(msg, "may not contain ','")))
                                        abort();
                                free(msg);
                        }
                }
                free(canonical);
        } else
                abort();
        free(text);
        return 0;
}
