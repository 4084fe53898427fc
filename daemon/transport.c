/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The shared-memory transport's glue (rings.h): the rings' settings, the notices they carry, and
 * the WAIT and WAKE frames on a ring reader's socket.
 */
#include <string.h>

#include "core/clock.h"
#include "log.h"
#include "manager.h"
#include "peer.h"
#include "tpd-protocol.h"

/* The rings' size is a power of two, the most ShmRingKB= holds. */
void manager_setup_rings(Manager *m) {
        uint64_t size = (uint64_t) m->config.shm_ring_kb * 1024, data_size = RING_DATA_SIZE_MIN;
        _cleanup_free_ char *clock = NULL;
        clockid_t id = (clockid_t) -1;

        while (data_size * 2 <= size)
                data_size *= 2;
        (void) tracing_get_clock(m->tracing, &clock);
        if (!clock || trace_clock_id(clock, &id) < 0)
                id = (clockid_t) -1;
        shm_rings_init(&m->rings, data_size, m->n_cpus, (uint32_t) id, manager_shm_wake);
}

void manager_publish_notice(Manager *m, uint64_t ts, const char *notice, const char *message) {
        Batch *b;

        if (m->rings.n_readers == 0)
                return;
        if (stream_notice_line(ts, notice, message, &b) < 0) {
                log_debug("Failed to publish a notice to the rings.");
                return;
        }
        shm_rings_publish_line(&m->rings, RING_NOTICE, ts, b->buf.data, b->buf.len);
        batch_unref(b);
}

/* SYNC frames: what every CPU holds now goes out, then each asker's notice. Not from the peer's
 * input handler: routing flushes the streams, which may end the asking one. */
static int manager_on_sync(sd_event_source *s, void *userdata) {
        Manager *m = userdata;
        uint64_t ts;

        manager_read_all(m);
        manager_sync_decoding(m);
        ts = manager_trace_clock_now_ns(m);
        for (Peer *p = m->peers; p; p = p->next)
                if (p->sync_pending) {
                        static const char message[] =
                                "every record written before the sync came before this line";

                        p->sync_pending = false;
                        /* What the stream lost comes before the sync too; a recording flags its
                         * losses on its pages, and a notice that finds its queue full waits. */
                        if ((!p->recording && stream_report_drops(p->stream, true) < 0) ||
                            peer_queue_notice(p, ts, "sync", message) < 0)
                                log_debug("Peer %d: failed to queue the sync notice.", (int) p->pid);
                }
        manager_flush_peers(m);
        return 0;
}

static int manager_want_sync(Manager *m, Peer *p) {
        int r;

        if (!m->sync_defer) {
                r = sd_event_add_defer(m->event, &m->sync_defer, manager_on_sync, m);
                if (r < 0)
                        return r;
        }
        p->sync_pending = true;
        return sd_event_source_set_enabled(m->sync_defer, SD_EVENT_ONESHOT);
}

/* A socket stream's or a recording's client may send SYNC frames; anything else is discarded. */
static ssize_t manager_on_socket_input(Manager *m, Peer *p, const uint8_t *in, size_t size) {
        size_t taken = 0;

        while (size - taken >= sizeof(TpdFrame)) {
                TpdFrame h;

                memcpy(&h, in + taken, sizeof(h));
                if (h.type != TPD_FRAME_SYNC || h.length != 0 || h.cpu != 0 || h.arg != 0)
                        return (ssize_t) size;
                taken += sizeof(h);
                if (manager_want_sync(m, p) < 0)
                        return -ENOMEM;
        }
        return (ssize_t) taken;
}

/* A ring's reader asks to be woken (WAIT) and tells what it delivered and lost (STATS): nothing
 * else. */
ssize_t manager_on_stream_input(Peer *p, const void *data, size_t size, void *userdata) {
        const uint8_t *in = data;
        size_t taken = 0;

        if (!p->shm)
                return manager_on_socket_input(userdata, p, in, size);
        while (size - taken >= sizeof(TpdFrame)) {
                TpdFrame h;
                uint64_t v[2];

                memcpy(&h, in + taken, sizeof(h));
                if (h.cpu != 0 || h.arg != 0 ||
                    !((h.type == TPD_FRAME_WAIT && h.length == 8) ||
                      (h.type == TPD_FRAME_STATS && h.length == 16))) {
                        log_debug("Peer %d: not a WAIT or STATS frame, closing.", (int) p->pid);
                        return -EBADMSG;
                }
                if (size - taken < sizeof(h) + h.length)
                        break;
                memcpy(v, in + taken + sizeof(h), h.length);
                taken += sizeof(h) + h.length;
                if (h.type == TPD_FRAME_WAIT)
                        shm_reader_wait(p->shm, v[0]);
                else {
                        /* The client's word, shown as its stream's in GetStatus and nowhere
                         * else: it can only misreport itself. */
                        p->shm->reported_delivered = v[0];
                        p->shm->reported_lost = v[1];
                }
        }
        return (ssize_t) taken;
}

/* Wakes a ring's reader with a WAKE frame. One is enough while it waits to be written: a reader
 * that does not read its socket gets no more. */
void manager_shm_wake(void *owner, uint64_t head_seq) {
        Peer *p = owner;
        TpdSeqFrame f = {
                .header = { .type = TPD_FRAME_WAKE, .length = sizeof(f.seq) },
                .seq = head_seq,
        };

        if (!p->stream || !queue_is_empty(&p->stream->queue))
                return;
        if (queue_push_copy(&p->stream->queue, &f, sizeof(f)) < 0)
                log_debug("Peer %d: failed to queue a wake-up.", (int) p->pid);
}
