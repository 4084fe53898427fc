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

/* A stream shares a batch when the lines it selects make at least 1/STREAM_SHARE_RATIO of the
 * batch's memory; below that, copying them costs less memory than keeping the batch alive. */
#define STREAM_SHARE_RATIO 4U

void stream_done(Stream *s) {
        queue_done(&s->queue);
        selection_done(&s->selection);
        free(s->dropped);
        free(s->dropped_ts);
        free(s->carried);
        free(s->carried_ts);
        free(s->base);
        free(s->sel);
        free(s->sel_count);
        batch_unref(s->own);
}

Stream *stream_free(Stream *s) {
        if (!s)
                return NULL;
        stream_done(s);
        free(s);
        return NULL;
}

int stream_init(Stream *s, StreamMode mode, unsigned n_cpus, size_t max_bytes) {
        s->mode = mode;
        s->n_cpus = n_cpus;
        s->max_bytes = max_bytes;
        s->dropped = calloc(n_cpus, sizeof(uint64_t));
        s->dropped_ts = calloc(n_cpus, sizeof(uint64_t));
        s->carried = calloc((size_t) n_cpus * _RECORD_KIND_MAX, sizeof(uint64_t));
        s->carried_ts = calloc((size_t) n_cpus * _RECORD_KIND_MAX, sizeof(uint64_t));
        s->base = calloc((size_t) n_cpus * 2, sizeof(uint64_t));
        if (!s->dropped || !s->dropped_ts || !s->carried || !s->carried_ts || !s->base) {
                stream_done(s);
                return -ENOMEM;
        }
        return 0;
}

int stream_new(StreamMode mode, unsigned n_cpus, size_t max_bytes, Stream **ret) {
        Stream *s = calloc(1, sizeof(Stream));
        int r;

        if (!s)
                return -ENOMEM;
        r = stream_init(s, mode, n_cpus, max_bytes);
        if (r < 0) {
                free(s);
                return r;
        }
        *ret = s;
        return 0;
}

int stream_set_base(Stream *s, unsigned cpu, uint64_t overrun, uint64_t dropped) {
        if (cpu >= s->n_cpus)
                return -EINVAL;
        s->base[cpu * 2] = overrun;
        s->base[cpu * 2 + 1] = dropped;
        return 0;
}

/* Chunks are never reallocated: queued slices refer to them by offset, and the data must not move
 * under a partial write. */
char *stream_own_append(Stream *s, size_t length, uint32_t *ret_offset) {
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
                *stream_carried(s, cpu, rec->kind) += n;
                *stream_carried_ts(s, cpu, rec->kind) = rec->ts;
        }
        s->drops_pending = true;
}

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

/* Ends the line of a batch made by stream_line_start(). */
static int stream_line_end(Batch *b) {
        int r = jsonbuf_reserve(&b->buf, 2);

        if (r < 0) {
                batch_unref(b);
                return r;
        }
        jsonbuf_put(&b->buf, "}\n", 2);
        return 0;
}

/* Queues a whole line, whatever the queue holds: such lines are rare and small. */
static int stream_line_queue(Stream *s, Batch *b) {
        int r = stream_queue(s, b, 0, (uint32_t) b->buf.len, true);

        batch_unref(b);
        return r;
}

int stream_clock_line(uint64_t ts, const char *clock, int64_t offset_ns, Batch **ret) {
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
        r = stream_line_end(b);
        if (r >= 0)
                *ret = b;
        return r;
}

int stream_queue_clock(Stream *s, uint64_t ts, const char *clock, int64_t offset_ns) {
        Batch *b;
        int r;

        r = stream_clock_line(ts, clock, offset_ns, &b);
        if (r < 0)
                return r;
        return stream_line_queue(s, b);
}

int stream_notice_object(uint64_t ts, const char *notice, const char *message, Batch **ret) {
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
        *ret = b;
        return 0;
}

int stream_notice_line(uint64_t ts, const char *notice, const char *message, Batch **ret) {
        Batch *b;
        int r;

        r = stream_notice_object(ts, notice, message, &b);
        if (r >= 0)
                r = stream_line_end(b);
        if (r >= 0)
                *ret = b;
        return r;
}

int stream_queue_notice(Stream *s, uint64_t ts, const char *notice, const char *message) {
        Batch *b;
        int r;

        r = stream_notice_line(ts, notice, message, &b);
        if (r < 0)
                return r;
        return stream_line_queue(s, b);
}

const int stream_loss_order[STREAM_LOSS_KINDS] = { TPD_LOST_OVERRUN, TPD_LOST_DROPPED, TPD_LOST_UNKNOWN,
                                                   TPD_LOST_DECODE, TPD_LOST_CLIENT };

int stream_report_drops(Stream *s, bool always) {
        Batch *b;
        int r = 0;

        if (!s->drops_pending || (!always && s->queue.held > s->max_bytes / 2))
                return 0;

        b = batch_new();
        if (!b)
                return -ENOMEM;
        for (unsigned cpu = 0; cpu < s->n_cpus && r >= 0; cpu++)
                for (size_t i = 0; i < STREAM_LOSS_KINDS && r >= 0; i++) {
                        int kind = stream_loss_order[i];
                        uint64_t *n = stream_carried(s, cpu, kind);
                        uint64_t ts = *stream_carried_ts(s, cpu, kind);
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

unsigned stream_variant(const Stream *s) {
        return (s->selection.print ? DECODER_VARIANT_PRINT : 0) | (s->symbolic ? DECODER_VARIANT_SYM : 0) |
               (s->cgroup ? DECODER_VARIANT_CGROUP : 0) | (s->stack ? DECODER_VARIANT_STACK : 0);
}

/* Whether the stream needs a variant of b's lines: it wants more than they carry. */
static bool stream_needs_variant(const Stream *s, const Batch *b) {
        return (stream_variant(s) & ~(unsigned) b->variant) != 0;
}

uint64_t stream_loss_share(const Stream *s, const Record *rec) {
        if (!s->has_base || (rec->kind != TPD_LOST_OVERRUN && rec->kind != TPD_LOST_DROPPED) ||
            rec->cpu >= s->n_cpus)
                return rec->lost;
        return loss_after_base(rec->lost, rec->lost_base,
                               s->base[rec->cpu * 2 + (rec->kind == TPD_LOST_DROPPED)]);
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
                        return stream_report_drops(s, false) < 0 ? -ENOMEM : 0;
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
                r = stream_report_drops(s, false);
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
        if (!selection_matches(&s->selection, d, &b->records[index]))
                return 0;
        return stream_take(s, d, b, index, false);
}

/* Whether the stream selects every record of the batch, each loss at its whole count, without
 * looking at each (the batch's event ids). */
static bool stream_selects_all(const Stream *s, const Batch *b) {
        const Selection *sel = &s->selection;

        if (sel->filter || sel->n_pids > 0 || sel->follow || !selection_has_cpu(sel, b->records[0].cpu))
                return false;
        if (sel->events) {
                if (b->many_ids)
                        return false;
                for (unsigned i = 0; i < b->n_ids; i++)
                        if (!selection_has_event(sel, b->ids[i]))
                                return false;
        }
        /* A loss partly from before the stream started needs a count of its own. */
        for (size_t i = 0; b->n_lost > 0 && i < b->n_records; i++)
                if (b->records[i].kind != RECORD_EVENT &&
                    stream_loss_share(s, &b->records[i]) != b->records[i].lost)
                        return false;
        return true;
}

/* Whether the stream can take the whole batch at once: it selects every record and wants the lines
 * as they are (with variant_ok, also when it wants a variant of each), with nothing pending. */
static bool stream_takes_all(const Stream *s, const Batch *b, bool variant_ok) {
        if (s->mode != STREAM_RAW || (stream_needs_variant(s, b) && !variant_ok) || s->drops_pending)
                return false;
        return stream_selects_all(s, b);
}

/* Lists in s->sel the records of the batch the stream selects, a loss whatever its share, and
 * returns how many: the one per-record decision of stream_offer_batch() and stream_count_batch().
 * -ENOMEM without room for the list. */
static int stream_select(Stream *s, Decoder *d, const Batch *b, size_t *ret_n) {
        size_t n = 0;

        if (s->sel_cap < b->n_records) {
                uint32_t *sel = reallocarray(s->sel, b->n_records, sizeof(uint32_t));
                uint64_t *count = reallocarray(s->sel_count, b->n_records, sizeof(uint64_t));

                if (sel)
                        s->sel = sel;
                if (count)
                        s->sel_count = count;
                if (!sel || !count)
                        return -ENOMEM;
                s->sel_cap = b->n_records;
        }
        for (size_t i = 0; i < b->n_records; i++)
                if (selection_matches(&s->selection, d, &b->records[i]))
                        s->sel[n++] = (uint32_t) i;
        *ret_n = n;
        return 0;
}

int stream_count_batch(Stream *s, Decoder *d, const Batch *b, StreamCount *ret) {
        size_t n, m = 0;
        int r;

        *ret = (StreamCount){};
        if (b->n_records == 0)
                return 0;
        if (stream_selects_all(s, b)) {
                ret->all = true;
                return 0;
        }
        r = stream_select(s, d, b, &n);
        if (r < 0)
                return r;
        /* What stream_take() queues: an event, or a loss with its share, none for a share of 0. */
        for (size_t k = 0; k < n; k++) {
                const Record *rec = &b->records[s->sel[k]];
                uint64_t count = rec->kind == RECORD_EVENT ? 1 : stream_loss_share(s, rec);

                if (count == 0)
                        continue;
                s->sel[m] = s->sel[k];
                s->sel_count[m++] = count;
        }
        ret->index = s->sel;
        ret->count = s->sel_count;
        ret->n = m;
        return 0;
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

        if (stream_select(s, d, b, &n_sel) < 0) {
                /* Not even room to look: every record this stream would take is lost. */
                for (size_t i = 0; i < b->n_records; i++)
                        if (selection_matches(&s->selection, d, &b->records[i]))
                                stream_drop(s, &b->records[i],
                                            b->records[i].kind == RECORD_EVENT
                                                    ? 1
                                                    : stream_loss_share(s, &b->records[i]));
                return 0;
        }

        /* Select first, then decide: share the batch when the selection makes a large part of it
         * and its memory fits the queue's limit, else copy the selected lines. */
        for (size_t k = 0; k < n_sel; k++) {
                size_t i = s->sel[k];

                if (stream_needs_variant(s, b) && b->records[i].kind == RECORD_EVENT) {
                        r = decoder_encode_variant(d, b, i, stream_variant(s));
                        if (r < 0)
                                return r;
                        sel_bytes += b->records[i].print_length;
                } else
                        sel_bytes += b->records[i].length;
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
