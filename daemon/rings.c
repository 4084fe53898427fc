/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "core/decode.h"
#include "log.h"
#include "rings.h"
#include "util.h"

struct ShmRing {
        ShmRings *rings;
        ShmRegion region;
        RingWriter writer;
        unsigned form; /* DECODER_VARIANT_* bits of its lines */
        ShmReader *readers;
        /* While a batch is published: its records, which the readers' counts are of; NULL for
         * notice and clock lines, which no page counts. */
        const Batch *batch;
};

void shm_rings_init(ShmRings *rs, uint64_t data_size, unsigned n_cpus, uint32_t clock, ShmWakeFn wake) {
        *rs = (ShmRings){ .data_size = data_size, .n_cpus = n_cpus, .clock = clock, .wake = wake };
}

static ShmRing *shm_ring_free(ShmRing *ring, uint32_t state) {
        if (!ring)
                return NULL;
        /* A client that still maps the ring keeps its memory: it reads the state, and no more
         * entries. */
        if (ring->region.mem)
                ring_writer_set_state(&ring->writer, state);
        /* A closed ring stays readable: its readers drain what tpd published before it stopped. */
        if (state == RING_STATE_RETIRED)
                shm_region_retire(&ring->region);
        else
                shm_region_done(&ring->region);
        free(ring);
        return NULL;
}

void shm_rings_done(ShmRings *rs) {
        for (unsigned i = 0; i < SHM_RING_FORMS; i++) {
                ShmRing *ring = rs->rings[i];

                if (!ring)
                        continue;
                for (ShmReader *r = ring->readers; r; r = r->next)
                        r->ring = NULL;
                rs->rings[i] = shm_ring_free(ring, RING_STATE_CLOSED);
        }
}

/* Each publish, before the ring's header shows it: every reader's page counts what its stream
 * takes of the entries. */
static void shm_ring_on_publish(void *userdata, const RingPublish *p) {
        ShmRing *ring = userdata;

        for (ShmReader *r = ring->readers; r; r = r->next)
                ring_page_publish(&r->page, p, ring->batch, ring->batch ? &r->count : NULL);
}

static int shm_ring_new(ShmRings *rs, unsigned form, ShmRing **ret) {
        ShmRing *ring;
        int r;

        ring = calloc(1, sizeof(ShmRing));
        if (!ring)
                return -ENOMEM;
        ring->rings = rs;
        ring->region = SHM_REGION_NULL;
        ring->form = form;
        r = shm_region_new(&ring->region, "tpd-ring", ring_mapping_size(rs->data_size));
        if (r >= 0)
                r = ring_writer_init(&ring->writer, ring->region.mem, ring->region.size, form, rs->n_cpus,
                                     rs->clock);
        if (r < 0) {
                shm_region_done(&ring->region);
                free(ring);
                return r;
        }
        ring->writer.on_publish = shm_ring_on_publish;
        ring->writer.userdata = ring;
        *ret = ring;
        return 0;
}

/* Whether the stream takes every record: no events, pids, CPUs or filter named. */
static bool stream_takes_every_record(const Stream *s) {
        const Selection *sel = &s->selection;

        return !sel->events && sel->n_pids == 0 && !sel->cpus && !sel->filter;
}

int shm_reader_new(ShmRings *rs, Stream *s, void *owner, ShmReader **ret) {
        unsigned form = stream_variant(s);
        bool all = stream_takes_every_record(s);
        ShmReader *rd;
        int r;

        /* Lines with a task's cgroup are made for each stream alone (its history moves on). */
        if (form >= SHM_RING_FORMS)
                return -EOPNOTSUPP;
        rd = calloc(1, sizeof(ShmReader));
        if (!rd)
                return -ENOMEM;
        rd->rings = rs;
        rd->stream = s;
        rd->owner = owner;
        rd->page_region = SHM_REGION_NULL;
        r = shm_region_new(&rd->page_region, "tpd-page", ring_page_size(rs->n_cpus, rs->data_size, all));
        if (r >= 0)
                r = ring_page_writer_init(&rd->page, rd->page_region.mem, rd->page_region.size, rs->n_cpus,
                                          rs->data_size, all);
        if (r >= 0 && !rs->rings[form])
                r = shm_ring_new(rs, form, &rs->rings[form]);
        if (r < 0) {
                shm_region_done(&rd->page_region);
                free(rd);
                return r;
        }
        rd->ring = rs->rings[form];
        rd->next = rd->ring->readers;
        rd->ring->readers = rd;
        rs->n_readers++;
        *ret = rd;
        return 0;
}

ShmReader *shm_reader_free(ShmReader *rd) {
        ShmRing *ring;

        if (!rd)
                return NULL;
        ring = rd->ring;
        if (ring) {
                for (ShmReader **p = &ring->readers; *p; p = &(*p)->next)
                        if (*p == rd) {
                                *p = rd->next;
                                break;
                        }
                if (!ring->readers) {
                        rd->rings->rings[ring->form] = NULL;
                        shm_ring_free(ring, RING_STATE_RETIRED);
                }
        }
        rd->rings->n_readers--;
        /* Its client is gone, unless tpd is stopping (the rings are closed, ring is NULL): then the
         * client may still need its page to drain the ring. */
        if (ring)
                shm_region_retire(&rd->page_region);
        else
                shm_region_done(&rd->page_region);
        free(rd);
        return NULL;
}

int shm_reader_reply(ShmReader *rd, ShmReply *ret) {
        int ring_fd, page_fd;

        if (!rd->ring)
                return -ESHUTDOWN;
        ring_fd = shm_region_reader_fd(&rd->ring->region);
        if (ring_fd < 0)
                return ring_fd;
        page_fd = shm_region_reader_fd(&rd->page_region);
        if (page_fd < 0) {
                safe_close(ring_fd);
                return page_fd;
        }
        *ret = (ShmReply){
                .fds = { ring_fd, page_fd },
                .ring_size = rd->ring->region.size,
                .start = rd->ring->writer.head,
                .start_seq = rd->ring->writer.head_seq,
                .page_size = rd->page_region.size,
        };
        return 0;
}

void shm_reader_set_base(ShmReader *rd, unsigned cpu, uint64_t overrun, uint64_t dropped) {
        ring_page_set_base(&rd->page, cpu, overrun, dropped);
}

void shm_reader_wait(ShmReader *rd, uint64_t seq) {
        if (!rd->ring)
                return;
        if (rd->ring->writer.head_seq > seq) {
                rd->armed = false;
                rd->rings->wake(rd->owner, rd->ring->writer.head_seq);
                return;
        }
        rd->armed = true;
        rd->wait_seq = seq;
}

/* After a publish: the readers that asked for it, if it holds something for them (a batch they
 * take part of; notice and clock lines are everyone's). */
static void shm_ring_wake(ShmRing *ring, bool batch) {
        for (ShmReader *rd = ring->readers; rd; rd = rd->next)
                if (rd->armed && ring->writer.head_seq > rd->wait_seq &&
                    (!batch || rd->count.all || rd->count.n > 0)) {
                        rd->armed = false;
                        ring->rings->wake(rd->owner, ring->writer.head_seq);
                }
}

/* The event records of the batch a count takes. */
static uint64_t count_events(const Batch *b, const StreamCount *c) {
        uint64_t n = 0;

        if (c->all)
                return b->n_records - b->n_lost;
        for (size_t k = 0; k < c->n; k++)
                n += b->records[c->index[k]].kind == RECORD_EVENT;
        return n;
}

static void shm_ring_publish_batch(ShmRing *ring, Decoder *d, Batch *b) {
        size_t refused = 0;
        int r;

        for (ShmReader *rd = ring->readers; rd; rd = rd->next) {
                r = stream_count_batch(rd->stream, d, b, &rd->count);
                if (r < 0) {
                        /* No room to list what it takes: it takes nothing of this batch, and its
                         * reader's counts stay true to what it gets. */
                        log_warning_errno(r, "Failed to select records for a stream: %m");
                        rd->count = (StreamCount){};
                }
                rd->stream->delivered += count_events(b, &rd->count);
        }
        ring->batch = b;
        if (ring->form & ~(unsigned) b->variant) {
                for (size_t i = 0; i < b->n_records; i++)
                        /* Out of memory: the plain line, rather than another ring's variant. */
                        if (b->records[i].kind == RECORD_EVENT &&
                            decoder_encode_variant(d, b, i, ring->form) < 0)
                                b->records[i].print_length = 0;
                (void) ring_append_batch_variant(&ring->writer, b, &refused);
        } else
                (void) ring_append_batch(&ring->writer, b, &refused);
        ring->batch = NULL;
        ring->rings->refused += refused;
        shm_ring_wake(ring, true);
}

void shm_rings_publish_batch(ShmRings *rs, Decoder *d, Batch *b) {
        if (rs->n_readers == 0)
                return;
        for (unsigned i = 0; i < SHM_RING_FORMS; i++)
                if (rs->rings[i])
                        shm_ring_publish_batch(rs->rings[i], d, b);
}

void shm_rings_publish_line(ShmRings *rs, uint8_t type, uint64_t ts, const char *line, size_t len) {
        RingItem it = { .type = type, .ts = ts, .line = line, .line_len = (uint32_t) len };

        for (unsigned i = 0; i < SHM_RING_FORMS; i++)
                if (rs->rings[i]) {
                        (void) ring_append(&rs->rings[i]->writer, &it, 1, NULL);
                        shm_ring_wake(rs->rings[i], false);
                }
}
