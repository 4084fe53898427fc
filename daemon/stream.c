/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "decode.h"
#include "filter.h"
#include "stream.h"
#include "util.h"

/* Each record of a non-upgraded stream is one Varlink reply. */
static const char more_prefix[] = "{\"continues\":true,\"parameters\":{\"record\":";
static const char more_suffix[] = "}}"; /* NUL included below */

Stream *stream_free(Stream *s) {
        if (!s)
                return NULL;
        queue_done(&s->queue);
        if (s->filter)
                tep_filter_free(s->filter);
        free(s->events);
        free(s->pids);
        free(s->cpus);
        free(s->dropped);
        free(s->dropped_ts);
        free(s);
        return NULL;
}

int stream_new(StreamMode mode, unsigned n_cpus, size_t max_bytes, Stream **ret) {
        Stream *s = calloc(1, sizeof(Stream));

        if (!s)
                return -ENOMEM;
        s->mode = mode;
        s->n_cpus = n_cpus;
        s->max_bytes = max_bytes;
        s->dropped = calloc(n_cpus, sizeof(uint64_t));
        s->dropped_ts = calloc(n_cpus, sizeof(uint64_t));
        if (!s->dropped || !s->dropped_ts) {
                stream_free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

static int bitmap_set(uint8_t **map, size_t *bits, unsigned i) {
        if (i >= *bits) {
                size_t n = ((size_t) i / 8 + 1) * 2;
                uint8_t *m = realloc(*map, n);
                if (!m)
                        return -ENOMEM;
                memset(m + *bits / 8, 0, n - *bits / 8);
                *map = m;
                *bits = n * 8;
        }
        (*map)[i / 8] |= (uint8_t) (1U << (i % 8));
        return 0;
}

static inline bool bitmap_test(const uint8_t *map, size_t bits, unsigned i) {
        return i < bits && (map[i / 8] & (1U << (i % 8)));
}

int stream_select_event(Stream *s, unsigned id) {
        return bitmap_set(&s->events, &s->events_bits, id);
}

int stream_select_cpu(Stream *s, unsigned cpu) {
        return bitmap_set(&s->cpus, &s->cpus_bits, cpu);
}

int stream_select_pid(Stream *s, int32_t pid) {
        int32_t *p = reallocarray(s->pids, s->n_pids + 1, sizeof(int32_t));
        if (!p)
                return -ENOMEM;
        s->pids = p;
        s->pids[s->n_pids++] = pid;
        return 0;
}

int stream_set_filter(Stream *s, struct tep_handle *tep, const char *filter, const char *const *events,
                      size_t n_events, char **ret_message) {
        struct tep_event_filter *f;

        f = tep_filter_alloc(tep);
        if (!f)
                return -ENOMEM;

        for (size_t i = 0; i < n_events; i++) {
                _cleanup_free_ char *text = NULL, *canonical = NULL, *message = NULL;
                const char *colon = strchr(events[i], ':');
                struct tep_event *event = NULL;
                enum tep_errno err;
                int r;

                if (colon) {
                        _cleanup_free_ char *system = strndup(events[i], (size_t) (colon - events[i]));
                        if (!system) {
                                tep_filter_free(f);
                                return -ENOMEM;
                        }
                        event = tep_find_event_by_name(tep, system, colon + 1);
                }
                if (!event) {
                        tep_filter_free(f);
                        if (ret_message && asprintf(ret_message, "%s: no format known", events[i]) < 0)
                                *ret_message = NULL;
                        return -EINVAL;
                }
                /* libtraceevent 1.7's filter parser crashes on some malformed text and reads quotes
                 * and precedence its own way: it only ever sees tpd's canonical text. */
                r = filter_canonicalize(event, filter, FILTER_STREAM, &canonical, &message);
                if (r < 0) {
                        tep_filter_free(f);
                        if (r == -EINVAL && ret_message &&
                            asprintf(ret_message, "%s: %s", events[i], strempty(message)) < 0)
                                *ret_message = NULL;
                        return r;
                }

                /* libtraceevent names events "system/event" in filter text. */
                if (asprintf(&text, "%.*s/%s:%s", (int) (colon - events[i]), events[i], colon + 1,
                             canonical) < 0) {
                        tep_filter_free(f);
                        return -ENOMEM;
                }
                err = tep_filter_add_filter_str(f, text);
                if (err != TEP_ERRNO__SUCCESS) {
                        char buf[256];
                        tep_filter_strerror(f, err, buf, sizeof(buf));
                        if (ret_message && asprintf(ret_message, "%s: %s", events[i], buf) < 0)
                                *ret_message = NULL;
                        tep_filter_free(f);
                        return -EINVAL;
                }
        }

        if (s->filter)
                tep_filter_free(s->filter);
        s->filter = f;
        return 0;
}

bool stream_matches(const Stream *s, Decoder *d, const Record *r) {
        if (s->cpus && !bitmap_test(s->cpus, s->cpus_bits, r->cpu))
                return false;
        /* Losses concern every event of the CPU: whoever watches it must hear of them. */
        if (r->kind != RECORD_EVENT)
                return true;
        if (s->events && !bitmap_test(s->events, s->events_bits, r->event_id))
                return false;
        if (s->n_pids > 0) {
                bool found = false;
                for (size_t i = 0; i < s->n_pids; i++)
                        if (s->pids[i] == r->pid) {
                                found = true;
                                break;
                        }
                if (!found)
                        return false;
        }
        if (s->filter) {
                struct tep_record rec = {
                        .ts = r->ts,
                        .data = d ? decoder_padded_raw(d, r) : (void *) r->raw,
                        .size = (int) r->raw_size,
                        .record_size = (int) r->raw_size,
                        .cpu = (int) r->cpu,
                };
                /* FILTER_NOT_FOUND: an event the filter was not set for; it does not pass. */
                return tep_filter_match(s->filter, &rec) == TEP_ERRNO__FILTER_MATCH;
        }
        return true;
}

static int stream_queue(Stream *s, Batch *b, uint32_t offset, uint32_t length) {
        int r;

        if (s->mode == STREAM_RAW)
                return queue_push_batch(&s->queue, b, offset, length);

        /* The line without its newline becomes the "record" of a reply. */
        r = queue_push_static(&s->queue, more_prefix, sizeof(more_prefix) - 1);
        if (r >= 0)
                r = queue_push_batch(&s->queue, b, offset, length - 1);
        if (r >= 0)
                r = queue_push_static(&s->queue, more_suffix, sizeof(more_suffix));
        return r;
}

int stream_queue_notice(Stream *s, uint64_t ts, const char *notice, const char *message) {
        static const char key_notice[] = ",\"notice\":", key_message[] = ",\"message\":";
        Batch *b = batch_new();
        JsonBuf *j;
        int r;

        if (!b)
                return -ENOMEM;
        j = &b->buf;
        r = jsonbuf_reserve(j, 8 + JSON_U64_MAX_LEN + sizeof(key_notice) + sizeof(key_message) + 2);
        if (r >= 0) {
                jsonbuf_put(j, "{\"ts\":", 6);
                json_put_u64(j, ts);
                jsonbuf_put(j, key_notice, sizeof(key_notice) - 1);
                r = json_append_string(j, notice, strlen(notice));
        }
        if (r >= 0)
                r = jsonbuf_reserve(j, sizeof(key_message));
        if (r >= 0) {
                jsonbuf_put(j, key_message, sizeof(key_message) - 1);
                r = json_append_string(j, message, strlen(message));
        }
        if (r >= 0)
                r = jsonbuf_reserve(j, 2);
        if (r >= 0) {
                jsonbuf_put(j, "}\n", 2);
                r = stream_queue(s, b, 0, (uint32_t) j->len);
        }
        batch_unref(b);
        return r;
}

int stream_report_drops(Stream *s) {
        Batch *b;
        int r = 0;

        if (!s->drops_pending || s->queue.bytes > s->max_bytes / 2)
                return 0;

        b = batch_new();
        if (!b)
                return -ENOMEM;
        for (unsigned cpu = 0; cpu < s->n_cpus && r >= 0; cpu++) {
                if (s->dropped[cpu] == 0)
                        continue;
                r = batch_add_lost(b, s->dropped_ts[cpu], cpu, s->dropped[cpu], RECORD_LOST_CLIENT);
                if (r < 0)
                        break;
                r = stream_queue(s, b, b->records[b->n_records - 1].offset, b->records[b->n_records - 1].length);
                if (r < 0)
                        break;
                s->dropped[cpu] = 0;
        }
        batch_unref(b);
        if (r >= 0)
                s->drops_pending = false;
        return r;
}

int stream_offer(Stream *s, Decoder *d, Batch *b, size_t index) {
        const Record *rec = &b->records[index];
        uint32_t offset, length;
        int r;

        if (!stream_matches(s, d, rec))
                return 0;

        if (s->print && rec->kind == RECORD_EVENT) {
                r = decoder_encode_print(d, b, index);
                if (r < 0)
                        return r;
                rec = &b->records[index];
                offset = rec->print_offset;
                length = rec->print_length;
        } else {
                offset = rec->offset;
                length = rec->length;
        }

        if (s->drops_pending) {
                r = stream_report_drops(s);
                if (r < 0)
                        return r;
        }

        if (s->queue.bytes + length > s->max_bytes || s->drops_pending) {
                unsigned cpu = rec->cpu < s->n_cpus ? rec->cpu : 0;
                uint64_t n = rec->kind == RECORD_EVENT ? 1 : rec->lost;

                /* A lost record that cannot be queued adds its count to ours. */
                s->dropped[cpu] += n;
                s->dropped_ts[cpu] = rec->ts;
                s->lost_client += n;
                s->drops_pending = true;
                return 0;
        }

        r = stream_queue(s, b, offset, length);
        if (r < 0)
                return r;
        if (rec->kind == RECORD_EVENT)
                s->delivered++;
        return 1;
}

/* Whether the stream selects every record of the batch without looking at each. */
static bool stream_takes_all(const Stream *s, const Batch *b) {
        if (s->mode != STREAM_RAW || s->print || s->filter || s->n_pids > 0 || s->drops_pending)
                return false;
        if (s->cpus && !bitmap_test(s->cpus, s->cpus_bits, b->records[0].cpu))
                return false;
        if (s->events) {
                if (b->many_ids)
                        return false;
                for (unsigned i = 0; i < b->n_ids; i++)
                        if (!bitmap_test(s->events, s->events_bits, b->ids[i]))
                                return false;
        }
        return true;
}

int stream_offer_batch(Stream *s, Decoder *d, Batch *b) {
        size_t start, queued = 0;
        int r;

        if (b->n_records == 0)
                return 0;

        start = b->records[0].offset;
        if (stream_takes_all(s, b) && s->queue.bytes + (b->plain_end - start) <= s->max_bytes) {
                r = queue_push_batch(&s->queue, b, (uint32_t) start, (uint32_t) (b->plain_end - start));
                if (r < 0)
                        return r;
                s->delivered += b->n_records - b->n_lost;
                return (int) b->n_records;
        }

        for (size_t i = 0; i < b->n_records; i++) {
                r = stream_offer(s, d, b, i);
                if (r < 0)
                        return r;
                queued += (size_t) r;
        }
        return (int) queued;
}
