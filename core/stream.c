/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <string.h>

#include <traceevent/event-parse.h>

#include "core/counters.h"
#include "core/decode.h"
#include "core/filter.h"
#include "core/page.h"
#include "core/stream.h"
#include "loss.h"
#include "tpd-protocol.h"
#include "util.h"

/* Each record of a non-upgraded stream is one Varlink reply. */
static const char more_prefix[] = "{\"continues\":true,\"parameters\":{\"record\":";
static const char more_suffix[] = "}}"; /* NUL included below */

/* The stream's own buffer grows in chunks of this size: a chunk is freed once all of it has been
 * written, so a stream keeps at most one chunk beyond what it has queued. */
#define STREAM_CHUNK_SIZE (64U * 1024U)
/* A stream shares a batch when the lines it selects make at least 1/STREAM_SHARE_RATIO of the
 * batch's memory; below that, copying them costs less memory than keeping the batch alive. */
#define STREAM_SHARE_RATIO 4U
#define CARRIED(s, cpu, kind) ((s)->carried[(size_t) (cpu) *_RECORD_KIND_MAX + (kind)])

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
        free(s->carried);
        free(s->carried_ts);
        free(s->base);
        free(s->sel);
        free(s->missed);
        free(s->overrun_seen);
        free(s->comm_pids);
        free(s->scratch);
        free(s->notice);
        batch_unref(s->own);
        free(s);
        return NULL;
}

int stream_new(StreamMode mode, unsigned n_cpus, size_t max_bytes, Stream **ret) {
        Stream *s = calloc(1, sizeof(Stream));

        if (!s)
                return -ENOMEM;
        s->mode = mode;
        s->comm_key = hash_key_new();
        s->n_cpus = n_cpus;
        s->max_bytes = max_bytes;
        s->dropped = calloc(n_cpus, sizeof(uint64_t));
        s->dropped_ts = calloc(n_cpus, sizeof(uint64_t));
        s->carried = calloc((size_t) n_cpus * _RECORD_KIND_MAX, sizeof(uint64_t));
        s->carried_ts = calloc((size_t) n_cpus * _RECORD_KIND_MAX, sizeof(uint64_t));
        s->base = calloc((size_t) n_cpus * 2, sizeof(uint64_t));
        if (mode == STREAM_PAGES) {
                s->missed = calloc(n_cpus, sizeof(uint64_t));
                s->overrun_seen = calloc((size_t) n_cpus * 2, sizeof(uint64_t));
        }
        if (!s->dropped || !s->dropped_ts || !s->carried || !s->carried_ts || !s->base ||
            (mode == STREAM_PAGES && (!s->missed || !s->overrun_seen))) {
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

int stream_set_base(Stream *s, unsigned cpu, uint64_t overrun, uint64_t dropped) {
        if (cpu >= s->n_cpus)
                return -EINVAL;
        s->base[cpu * 2] = overrun;
        s->base[cpu * 2 + 1] = dropped;
        if (s->overrun_seen) {
                s->overrun_seen[cpu * 2] = overrun;
                s->overrun_seen[cpu * 2 + 1] = dropped;
        }
        return 0;
}

bool stream_matches(const Stream *s, Decoder *d, const Record *r) {
        if (s->cpus && !bitmap_test(s->cpus, s->cpus_bits, r->cpu))
                return false;
        /* Records of an event id without a format concern the streams that would have got them:
         * those that select that id, or every event (of the record's pid). A filter is set for
         * known events only, so nothing unknown passes it. */
        if (r->kind == TPD_LOST_UNKNOWN && s->filter)
                return false;
        /* Other losses concern every event of the CPU: whoever watches it must hear of them. */
        if (r->kind != RECORD_EVENT && r->kind != TPD_LOST_UNKNOWN)
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
        if (s->filter && r->kind == RECORD_EVENT) {
                struct tep_record rec = {
                        .ts = r->ts,
                        .data = d ? decoder_padded_raw(d, r) : (void *) r->raw,
                        .size = (int) (d ? MIN(r->raw_size, DECODER_PADDED_MAX) : r->raw_size),
                        .record_size = (int) (d ? MIN(r->raw_size, DECODER_PADDED_MAX) : r->raw_size),
                        .cpu = (int) r->cpu,
                };
                /* FILTER_NOT_FOUND: an event the filter was not set for; it does not pass. */
                return tep_filter_match(s->filter, &rec) == TEP_ERRNO__FILTER_MATCH;
        }
        return true;
}

/* Makes room for length bytes at the end of the stream's own buffer and returns where they go.
 * Chunks are never reallocated: queued slices refer to them by offset, and the data must not move
 * under a partial write. */
static char *stream_own_append(Stream *s, size_t length, uint32_t *ret_offset) {
        Batch *own = s->own;
        char *p;

        if (own && own->refs == 1)
                batch_reset(own); /* nothing queued refers to it any more */
        if (!own || own->buf.cap - own->buf.len < length) {
                Batch *b = batch_new();
                if (!b)
                        return NULL;
                if (jsonbuf_reserve(&b->buf, MAX(length, (size_t) STREAM_CHUNK_SIZE)) < 0) {
                        batch_unref(b);
                        return NULL;
                }
                /* The end of the old chunk that stays empty lives as long as its last slice: charged
                 * to that slice, so that the queue's charge is the memory its chunks hold. */
                if (own)
                        queue_charge_tail(&s->queue, own, own->buf.cap - own->buf.len);
                batch_unref(s->own);
                s->own = own = b;
        }
        *ret_offset = (uint32_t) own->buf.len;
        p = own->buf.data + own->buf.len;
        own->buf.len += length;
        return p;
}

/* Appends a copy of a line to the stream's own buffer. */
static int stream_copy(Stream *s, const char *data, size_t length, uint32_t *ret_offset) {
        char *p = stream_own_append(s, length, ret_offset);

        if (!p)
                return -ENOMEM;
        memcpy(p, data, length);
        return 0;
}

/* What queueing a line costs the stream's charge. */
static size_t stream_cost(const Stream *s, const Batch *b, size_t length, bool share) {
        size_t cost = share ? queue_charge_for(&s->queue, b) : length;

        if (s->mode == STREAM_MORE)
                cost += 2 * sizeof(QueueEntry);
        return cost;
}

/* Queues one line, a slice of b (share) or a copy of it. Either all of it is queued or nothing. */
static int stream_queue(Stream *s, Batch *b, uint32_t offset, uint32_t length, bool share) {
        Batch *src = b;
        int r;

        r = queue_reserve(&s->queue, s->mode == STREAM_MORE ? 3 : 1);
        if (r < 0)
                return r;
        if (!share) {
                r = stream_copy(s, b->buf.data + offset, length, &offset);
                if (r < 0)
                        return r;
                src = s->own;
        }

        if (s->mode == STREAM_RAW)
                return share ? queue_push_batch(&s->queue, src, offset, length)
                             : queue_push_own(&s->queue, src, offset, length);

        /* The line without its newline becomes the "record" of a reply. The room was made above:
         * these pushes cannot fail. */
        (void) queue_push_static(&s->queue, more_prefix, sizeof(more_prefix) - 1);
        if (share)
                (void) queue_push_batch(&s->queue, src, offset, length - 1);
        else
                (void) queue_push_own(&s->queue, src, offset, length - 1);
        (void) queue_push_static(&s->queue, more_suffix, sizeof(more_suffix));
        return 0;
}

/* Counts records the stream does not get: its own queue's fault (client), or a loss of another
 * cause whose lost record could not be queued, kept under its own cause. */
static void stream_drop(Stream *s, const Record *rec, uint64_t n) {
        unsigned cpu = rec->cpu < s->n_cpus ? rec->cpu : 0;

        if (rec->kind == RECORD_EVENT || rec->kind == TPD_LOST_CLIENT || rec->kind >= _RECORD_KIND_MAX) {
                s->dropped[cpu] += n;
                s->dropped_ts[cpu] = rec->ts;
                s->lost_client += n;
                if (s->counters && rec->kind == RECORD_EVENT)
                        counters_add_lost(s->counters, rec->event_id, rec->pid, n);
        } else {
                CARRIED(s, cpu, rec->kind) += n;
                s->carried_ts[(size_t) cpu * _RECORD_KIND_MAX + rec->kind] = rec->ts;
        }
        s->drops_pending = true;
}

static int stream_report_page_losses(Stream *s);

/* Starts a line of tpd's own, {"ts":TS,"KEY":"VALUE", in a new batch. */
static int stream_line_start(uint64_t ts, const char *key, const char *value, Batch **ret) {
        Batch *b = batch_new();
        JsonBuf *j;
        int r;

        if (!b)
                return -ENOMEM;
        j = &b->buf;
        r = jsonbuf_reserve(j, 8 + JSON_U64_MAX_LEN + strlen(key) + 4);
        if (r >= 0) {
                jsonbuf_put(j, "{\"ts\":", 6);
                json_put_u64(j, ts);
                jsonbuf_put(j, ",\"", 2);
                jsonbuf_put(j, key, strlen(key));
                jsonbuf_put(j, "\":", 2);
                r = json_append_string(j, value, strlen(value));
        }
        if (r < 0) {
                batch_unref(b);
                return r;
        }
        *ret = b;
        return 0;
}

/* Ends the line and queues it, whatever the queue holds: such lines are rare and small. */
static int stream_line_queue(Stream *s, Batch *b) {
        int r = jsonbuf_reserve(&b->buf, 2);

        if (r >= 0) {
                jsonbuf_put(&b->buf, "}\n", 2);
                r = stream_queue(s, b, 0, (uint32_t) b->buf.len, true);
        }
        batch_unref(b);
        return r;
}

int stream_queue_clock(Stream *s, uint64_t ts, const char *clock, int64_t offset_ns) {
        static const char key_offset[] = ",\"realtime_offset_ns\":";
        Batch *b;
        int r;

        r = stream_line_start(ts, "clock", clock, &b);
        if (r < 0)
                return r;
        r = jsonbuf_reserve(&b->buf, sizeof(key_offset) + JSON_I64_MAX_LEN);
        if (r < 0) {
                batch_unref(b);
                return r;
        }
        jsonbuf_put(&b->buf, key_offset, sizeof(key_offset) - 1);
        json_put_i64(&b->buf, offset_ns);
        return stream_line_queue(s, b);
}

/* A recording's notice: the line's object as a NOTICE frame, or kept for later (the latest only)
 * when the queue has no room for it. */
static int stream_notice_frame(Stream *s, Batch *b) {
        int r = jsonbuf_reserve(&b->buf, 1);

        if (r >= 0) {
                jsonbuf_putc(&b->buf, '}');
                r = stream_report_page_losses(s);
        }
        if (r >= 0 && !s->drops_pending)
                r = stream_queue_frame(s, TPD_FRAME_NOTICE, 0, 0, b->buf.data, b->buf.len, NULL, 0);
        else if (r >= 0)
                r = -ENOBUFS;
        if (r == -ENOBUFS) {
                char *text = strndup(b->buf.data, b->buf.len);

                r = text ? 0 : -ENOMEM;
                if (text) {
                        free(s->notice);
                        s->notice = text;
                        s->drops_pending = true;
                }
        }
        batch_unref(b);
        return r;
}

int stream_queue_notice(Stream *s, uint64_t ts, const char *notice, const char *message) {
        static const char key_message[] = ",\"message\":";
        Batch *b;
        int r;

        r = stream_line_start(ts, "notice", notice, &b);
        if (r < 0)
                return r;
        r = jsonbuf_reserve(&b->buf, sizeof(key_message));
        if (r >= 0) {
                jsonbuf_put(&b->buf, key_message, sizeof(key_message) - 1);
                r = json_append_string(&b->buf, message, strlen(message));
        }
        if (r < 0) {
                batch_unref(b);
                return r;
        }
        if (s->mode == STREAM_PAGES)
                return stream_notice_frame(s, b);
        return stream_line_queue(s, b);
}

static const int loss_order[] = { TPD_LOST_OVERRUN, TPD_LOST_DROPPED, TPD_LOST_UNKNOWN, TPD_LOST_DECODE,
                                  TPD_LOST_CLIENT };

int stream_report_drops(Stream *s) {
        const int *order = loss_order;
        Batch *b;
        int r = 0;

        if (s->mode == STREAM_PAGES)
                return stream_report_page_losses(s);
        if (!s->drops_pending || s->queue.held > s->max_bytes / 2)
                return 0;

        b = batch_new();
        if (!b)
                return -ENOMEM;
        for (unsigned cpu = 0; cpu < s->n_cpus && r >= 0; cpu++)
                for (size_t i = 0; i < ELEMENTSOF(loss_order) && r >= 0; i++) {
                        int kind = order[i];
                        uint64_t *n = kind == TPD_LOST_CLIENT ? &s->dropped[cpu] : &CARRIED(s, cpu, kind);
                        uint64_t ts = kind == TPD_LOST_CLIENT
                                              ? s->dropped_ts[cpu]
                                              : s->carried_ts[(size_t) cpu * _RECORD_KIND_MAX + kind];
                        const Record *rec;

                        if (*n == 0)
                                continue;
                        r = batch_add_lost(b, ts, cpu, *n, kind);
                        if (r < 0)
                                break;
                        rec = &b->records[b->n_records - 1];
                        r = stream_queue(s, b, rec->offset, rec->length, false);
                        if (r < 0)
                                break;
                        *n = 0;
                }
        batch_trim(b);
        batch_unref(b);
        if (r >= 0)
                s->drops_pending = false;
        return r;
}

/* What the stream's lines add to the plain ones (DECODER_VARIANT_* bits). */
static unsigned stream_variant(const Stream *s) {
        return (s->print ? DECODER_VARIANT_PRINT : 0) | (s->symbolic ? DECODER_VARIANT_SYM : 0);
}

/* Whether the stream needs a variant of b's lines: it wants more than they carry. */
static bool stream_needs_variant(const Stream *s, const Batch *b) {
        return (stream_variant(s) & ~(unsigned) b->variant) != 0;
}

/* The part of a kernel's loss record that falls after the stream's start. */
static uint64_t stream_loss_share(const Stream *s, const Record *rec) {
        uint64_t base, end = rec->lost_base + rec->lost;

        if (!s->has_base || (rec->kind != TPD_LOST_OVERRUN && rec->kind != TPD_LOST_DROPPED) ||
            rec->cpu >= s->n_cpus)
                return rec->lost;
        base = s->base[rec->cpu * 2 + (rec->kind == TPD_LOST_DROPPED)];
        if (end <= base)
                return 0;
        return rec->lost_base < base ? end - base : rec->lost;
}

/* Queues a record the stream selected, or counts it as lost. */
static int stream_take(Stream *s, Decoder *d, Batch *b, size_t index, bool share) {
        const Record *rec = &b->records[index];
        uint32_t offset, length;
        uint64_t n = 1;
        int r;

        if (rec->kind != RECORD_EVENT) {
                n = stream_loss_share(s, rec);
                if (n == 0)
                        return 0;
                if (n != rec->lost) {
                        /* Partly before the stream started: its own lost record, with its count. */
                        stream_drop(s, rec, n);
                        return stream_report_drops(s) < 0 ? -ENOMEM : 0;
                }
        }

        if (stream_needs_variant(s, b) && rec->kind == RECORD_EVENT) {
                r = decoder_encode_variant(d, b, index, stream_variant(s));
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

        if (s->drops_pending || s->queue.held + stream_cost(s, b, length, share) > s->max_bytes) {
                stream_drop(s, rec, n);
                return 0;
        }

        r = stream_queue(s, b, offset, length, share);
        if (r == -ENOMEM) {
                /* No memory for this stream's queue: the record is lost to it, and says so. */
                stream_drop(s, rec, n);
                return 0;
        }
        if (r < 0)
                return r;
        if (rec->kind == RECORD_EVENT)
                s->delivered++;
        return 1;
}

int stream_offer(Stream *s, Decoder *d, Batch *b, size_t index) {
        if (!stream_matches(s, d, &b->records[index]))
                return 0;
        return stream_take(s, d, b, index, false);
}

/* Whether the stream selects every record of the batch without looking at each; with variant_ok,
 * also when it wants a variant of each line. */
static bool stream_takes_all(const Stream *s, const Batch *b, bool variant_ok) {
        if (s->mode != STREAM_RAW || (stream_needs_variant(s, b) && !variant_ok) || s->filter ||
            s->n_pids > 0 || s->drops_pending)
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
        /* A loss partly from before the stream started needs a count of its own. */
        for (size_t i = 0; b->n_lost > 0 && i < b->n_records; i++)
                if (b->records[i].kind != RECORD_EVENT &&
                    stream_loss_share(s, &b->records[i]) != b->records[i].lost)
                        return false;
        return true;
}

/* A stream that takes every record of the batch in a variant (--symbolic, --print): the variants,
 * made one after another at the end of the batch's buffer, go out as one slice (the queue merges
 * slices that continue each other), without the per-record checks of stream_take(). Returns the
 * number of records queued, 0 to leave them to the per-record path (no room), or a negative errno. */
static int stream_take_variants(Stream *s, Decoder *d, Batch *b) {
        unsigned variant = stream_variant(s);
        int r;

        for (size_t i = 0; i < b->n_records; i++) {
                r = decoder_encode_variant(d, b, i, variant);
                if (r < 0)
                        return r;
        }
        if (s->queue.held + queue_charge_for(&s->queue, b) > s->max_bytes)
                return 0;
        for (size_t i = 0; i < b->n_records; i++) {
                const Record *rec = &b->records[i];
                bool event = rec->kind == RECORD_EVENT;

                r = queue_reserve(&s->queue, 1);
                if (r >= 0)
                        r = queue_push_batch(&s->queue, b, event ? rec->print_offset : rec->offset,
                                             event ? rec->print_length : rec->length);
                if (r == -ENOMEM) {
                        stream_drop(s, rec, event ? 1 : rec->lost);
                        continue;
                }
                if (r < 0)
                        return r;
                if (event)
                        s->delivered++;
        }
        return (int) b->n_records;
}

int stream_offer_batch(Stream *s, Decoder *d, Batch *b) {
        size_t start, queued = 0, n_sel = 0, sel_bytes = 0;
        bool share;
        int r;

        if (b->n_records == 0)
                return 0;

        start = b->records[0].offset;
        if (stream_takes_all(s, b, false) &&
            s->queue.held + queue_charge_for(&s->queue, b) <= s->max_bytes &&
            queue_reserve(&s->queue, 1) >= 0) {
                r = queue_push_batch(&s->queue, b, (uint32_t) start, (uint32_t) (b->plain_end - start));
                if (r < 0)
                        return r;
                s->delivered += b->n_records - b->n_lost;
                return (int) b->n_records;
        }
        if (stream_needs_variant(s, b) && stream_takes_all(s, b, true)) {
                r = stream_take_variants(s, d, b);
                if (r != 0)
                        return r;
        }

        if (s->sel_cap < b->n_records) {
                uint32_t *sel = reallocarray(s->sel, b->n_records, sizeof(uint32_t));
                if (!sel) {
                        /* Not even room to look: every record this stream would take is lost. */
                        for (size_t i = 0; i < b->n_records; i++)
                                if (stream_matches(s, d, &b->records[i]))
                                        stream_drop(s, &b->records[i],
                                                    b->records[i].kind == RECORD_EVENT
                                                            ? 1
                                                            : stream_loss_share(s, &b->records[i]));
                        return 0;
                }
                s->sel = sel;
                s->sel_cap = b->n_records;
        }

        /* Select first, then decide: share the batch when the selection makes a large part of it
         * and its memory fits the queue's limit, else copy the selected lines. */
        for (size_t i = 0; i < b->n_records; i++) {
                const Record *rec = &b->records[i];

                if (!stream_matches(s, d, rec))
                        continue;
                if (stream_needs_variant(s, b) && rec->kind == RECORD_EVENT) {
                        r = decoder_encode_variant(d, b, i, stream_variant(s));
                        if (r < 0)
                                return r;
                        rec = &b->records[i];
                        sel_bytes += rec->print_length;
                } else
                        sel_bytes += rec->length;
                s->sel[n_sel++] = (uint32_t) i;
        }
        if (n_sel == 0)
                return 0;
        share = sel_bytes * STREAM_SHARE_RATIO >= batch_memory(b) &&
                s->queue.held + queue_charge_for(&s->queue, b) <= s->max_bytes;

        for (size_t k = 0; k < n_sel; k++) {
                r = stream_take(s, d, b, s->sel[k], share);
                if (r < 0)
                        return r;
                queued += (size_t) r;
        }
        return (int) queued;
}

/*
 * Recordings (STREAM_PAGES): frames of raw pages, never decoded. A page goes out as the kernel
 * wrote it, less the records the stream did not select; what the stream lost before a page (the
 * kernel's overruns and dropped events, its own full queue) is flagged on that page as the kernel
 * flags overruns, so that trace-cmd reports it, and counted exactly in LOST frames.
 */

/* What a recording holds: its queue, and its table of the names it sent. */
static size_t stream_held(const Stream *s) {
        return s->queue.held + s->comm_pids_cap * sizeof(StreamComm);
}

/* Large frames (files) get a buffer of their own; small ones share the stream's chunks. */
#define STREAM_FRAME_OWN_MAX (STREAM_CHUNK_SIZE / 4)

int stream_queue_frame(Stream *s, uint32_t type, uint32_t cpu, uint32_t arg, const void *a, size_t na,
                       const void *b, size_t nb) {
        TpdFrame f = { .type = type, .length = (uint32_t) (na + nb), .cpu = cpu, .arg = arg };
        size_t length = sizeof(f) + na + nb;
        uint32_t offset;
        char *p;
        int r;

        if (na + nb > TPD_FRAME_MAX)
                return -E2BIG;
        /* Charged as queue_push_text() and queue_push_own() charge it: the frame's memory. */
        if (stream_held(s) + length + (length > STREAM_FRAME_OWN_MAX ? sizeof(Batch) : 0) > s->max_bytes)
                return -ENOBUFS;
        r = queue_reserve(&s->queue, 1);
        if (r < 0)
                return r;
        p = length > STREAM_FRAME_OWN_MAX ? malloc(length) : stream_own_append(s, length, &offset);
        if (!p)
                return -ENOMEM;
        memcpy(p, &f, sizeof(f));
        if (na > 0)
                memcpy(p + sizeof(f), a, na);
        if (nb > 0)
                memcpy(p + sizeof(f) + na, b, nb);
        if (length > STREAM_FRAME_OWN_MAX)
                return queue_push_text(&s->queue, p, length);
        return queue_push_own(&s->queue, s->own, offset, (uint32_t) length);
}

/* A LOST frame carries the protocol's first four causes only: "unknown" goes as "client". */
static uint32_t lost_cause(int kind) {
        return kind <= TPD_LOST_DECODE ? (uint32_t) kind : TPD_LOST_CLIENT;
}

/* Queues the frames that found no room before: loss counts and the latest notice. A frame that
 * still finds none stays pending (drops_pending), and so does the rest. */
static int stream_report_page_losses(Stream *s) {
        int r;

        if (!s->drops_pending)
                return 0;
        if (s->notice) {
                r = stream_queue_frame(s, TPD_FRAME_NOTICE, 0, 0, s->notice, strlen(s->notice), NULL, 0);
                if (r == -ENOBUFS)
                        return 0;
                if (r < 0)
                        return r;
                s->notice = mfree(s->notice);
        }
        for (unsigned cpu = 0; cpu < s->n_cpus; cpu++)
                for (size_t i = 0; i < ELEMENTSOF(loss_order); i++) {
                        int kind = loss_order[i];
                        uint64_t *n = kind == TPD_LOST_CLIENT ? &s->dropped[cpu] : &CARRIED(s, cpu, kind);
                        uint64_t payload[2];

                        if (*n == 0)
                                continue;
                        payload[0] = *n;
                        payload[1] = kind == TPD_LOST_CLIENT
                                             ? s->dropped_ts[cpu]
                                             : s->carried_ts[(size_t) cpu * _RECORD_KIND_MAX + kind];
                        r = stream_queue_frame(s, TPD_FRAME_LOST, cpu, lost_cause(kind), payload,
                                               sizeof(payload), NULL, 0);
                        if (r == -ENOBUFS)
                                return 0;
                        if (r < 0)
                                return r;
                        *n = 0;
                }
        s->drops_pending = false;
        return 0;
}

/* Counts a loss of the recording on cpu: flagged on its next page, and reported in a LOST frame. */
static void stream_page_loss(Stream *s, unsigned cpu, int kind, uint64_t count, uint64_t ts) {
        if (count == 0 || cpu >= s->n_cpus)
                return;
        if (count == UINT64_MAX || s->missed[cpu] == UINT64_MAX)
                s->missed[cpu] = UINT64_MAX;
        else
                s->missed[cpu] += count;
        if (count == UINT64_MAX)
                return; /* the flag says it; there is no count to report */
        if (kind == TPD_LOST_CLIENT) {
                s->dropped[cpu] += count;
                s->dropped_ts[cpu] = ts;
                s->lost_client += count;
        } else {
                CARRIED(s, cpu, kind) += count;
                s->carried_ts[(size_t) cpu * _RECORD_KIND_MAX + kind] = ts;
        }
        s->drops_pending = true;
}

void stream_note_kernel_losses(Stream *s, unsigned cpu, uint64_t overrun, uint64_t dropped, uint64_t ts) {
        uint64_t *seen;

        if (s->mode != STREAM_PAGES || s->finished || cpu >= s->n_cpus)
                return;
        /* The losses of a CPU the recording did not select are not its own. */
        if (s->cpus && !bitmap_test(s->cpus, s->cpus_bits, cpu))
                return;
        seen = &s->overrun_seen[cpu * 2];
        if (overrun > seen[0])
                stream_page_loss(s, cpu, TPD_LOST_OVERRUN, overrun - seen[0], ts);
        if (dropped > seen[1])
                stream_page_loss(s, cpu, TPD_LOST_DROPPED, dropped - seen[1], ts);
        seen[0] = MAX(seen[0], overrun);
        seen[1] = MAX(seen[1], dropped);
}

typedef struct PageKeepContext {
        Stream *s;
        Decoder *d;
        unsigned cpu;
        int32_t last_pid; /* of the last record kept: a run of one pid is named once */
        bool names;       /* the page may go out: send the names of its pids */
        int error;
} PageKeepContext;

static bool stream_page_keep(void *userdata, const PageEntry *e) {
        PageKeepContext *k = userdata;
        Stream *s = k->s;
        Record rec = {
                .ts = e->ts,
                .raw = e->payload,
                .raw_size = (uint32_t) e->size,
                .cpu = k->cpu,
                .kind = RECORD_EVENT,
        };
        uint16_t id;

        /* Every record names its event and pid in its common fields. */
        if (e->size < 8)
                return false;
        memcpy(&id, e->payload, 2);
        memcpy(&rec.pid, e->payload + 4, 4);
        rec.event_id = id;
        if (!stream_matches(s, k->d, &rec))
                return false;
        if (k->names && k->error >= 0 && rec.pid > 0 && rec.pid != k->last_pid)
                k->error = stream_send_comm(s, k->d, k->cpu, rec.pid, rec.ts);
        k->last_pid = rec.pid;
        return true;
}

int stream_offer_pages(Stream *s, Decoder *d, const PageSource *src, const void *pages, size_t n_pages) {
        size_t frame = sizeof(TpdFrame) + src->page_size;
        unsigned cpu = src->cpu;
        int queued = 0;

        if (s->mode != STREAM_PAGES || s->finished || cpu >= s->n_cpus)
                return 0;
        if (s->cpus && !bitmap_test(s->cpus, s->cpus_bits, cpu))
                return 0;
        if (s->scratch_size < frame) {
                uint8_t *p = realloc(s->scratch, frame);
                if (!p)
                        return -ENOMEM;
                s->scratch = p;
                s->scratch_size = frame;
        }

        for (size_t i = 0; i < n_pages; i++) {
                const uint8_t *page = (const uint8_t *) pages + i * src->page_size;
                uint8_t *out = s->scratch + sizeof(TpdFrame);
                /* A page that cannot go out needs no names: it is only counted. */
                PageKeepContext k = { .s = s,
                                      .d = d,
                                      .cpu = cpu,
                                      .last_pid = -1,
                                      .names = stream_held(s) + frame <= s->max_bytes };
                uint64_t walked = 0, flagged, ts = 0;
                PageWalk w;
                TpdFrame f;
                int kept, r;

                /* A loss the kernel flagged on the page is the growth of its overrun counter since
                 * the last one reported (the page may store a count, or not); it is flagged again
                 * below with whatever else this stream lost before the page. */
                if (page_walk_init(&w, page, src->page_size) >= 0 && page_missed(&w, &flagged)) {
                        uint64_t now = src->overrun ? src->overrun(src->userdata, cpu) : UINT64_MAX;

                        ts = w.page_ts;
                        if (now != UINT64_MAX)
                                stream_note_kernel_losses(s, cpu, now, s->overrun_seen[cpu * 2 + 1], ts);
                        else
                                stream_page_loss(s, cpu, TPD_LOST_OVERRUN, flagged, ts);
                }

                kept = page_filter(page, src->page_size, stream_page_keep, &k, out, &walked);
                if (kept == -EBADMSG) {
                        /* What the page held past the fault cannot be counted record by record. */
                        uint64_t left = page_records(page, src->page_size);
                        stream_page_loss(s, cpu, TPD_LOST_DECODE,
                                         MAX(left > walked ? left - walked : 0, (uint64_t) 1), ts);
                        kept = (int) page_records(out, src->page_size);
                }
                if (k.error < 0)
                        return k.error;
                if (kept <= 0)
                        continue;
                if (stream_held(s) + frame > s->max_bytes) {
                        stream_page_loss(s, cpu, TPD_LOST_CLIENT, (uint64_t) kept, w.page_ts);
                        continue;
                }

                /* The page's own flags were copied; what this stream lost replaces them. */
                {
                        uint64_t commit;
                        memcpy(&commit, out + 8, 8);
                        commit &= ~(PAGE_MISSED_EVENTS | PAGE_MISSED_STORED);
                        memcpy(out + 8, &commit, 8);
                }
                page_add_missed(out, src->page_size, s->missed[cpu]);
                r = stream_report_page_losses(s);
                if (r < 0)
                        return r;
                /* Losses (and a notice) not reported for want of room go before any later page. */
                if (s->drops_pending || stream_held(s) + frame > s->max_bytes) {
                        stream_page_loss(s, cpu, TPD_LOST_CLIENT, (uint64_t) kept, w.page_ts);
                        continue;
                }

                f = (TpdFrame){ .type = TPD_FRAME_PAGE,
                                .length = (uint32_t) src->page_size,
                                .cpu = cpu,
                                .arg = (uint32_t) kept };
                memcpy(s->scratch, &f, sizeof(f));
                r = queue_reserve(&s->queue, 1);
                if (r >= 0) {
                        uint32_t offset;
                        r = stream_copy(s, (const char *) s->scratch, frame, &offset);
                        if (r >= 0)
                                r = queue_push_own(&s->queue, s->own, offset, (uint32_t) frame);
                }
                if (r == -ENOMEM) {
                        stream_page_loss(s, cpu, TPD_LOST_CLIENT, (uint64_t) kept, w.page_ts);
                        continue;
                }
                if (r < 0)
                        return r;
                s->missed[cpu] = 0;
                s->pages++;
                s->delivered += (uint64_t) kept;
                queued += kept;
        }
        return queued;
}
