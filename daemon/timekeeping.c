/* SPDX-License-Identifier: LGPL-2.1-or-later */

/*
 * The trace clock against the system's: now on the trace clock, for records tpd makes itself; its
 * offset to the wall clock, and the clock records that tell streams when it moved.
 */

#include <stdlib.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/clock.h"
#include "log.h"
#include "manager.h"
#include "peer.h"

/* Now on the instance's trace clock, for records tpd makes itself. Clocks without a system
 * counterpart (local, global, x86-tsc, counter…) get CLOCK_MONOTONIC. */
uint64_t manager_trace_clock_now_ns(Manager *m) {
        _cleanup_free_ char *clock = NULL;
        clockid_t id = CLOCK_MONOTONIC;
        struct timespec ts;

        if (tracing_get_clock(m->tracing, &clock) >= 0)
                (void) trace_clock_id(clock, &id);
        if (clock_gettime(id, &ts) < 0)
                return 0;
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

int manager_realtime_offset(Manager *m, int64_t *ret_offset_ns, char **ret_clock) {
        _cleanup_free_ char *clock = NULL;
        struct timespec rt, t, rt2;
        clockid_t id;
        int r;

        r = tracing_get_clock(m->tracing, &clock);
        if (r < 0)
                return r;
        if (trace_clock_id(clock, &id) < 0)
                return -ENOENT;
        /* The trace clock read between two reads of the wall clock: their middle is its moment. */
        if (clock_gettime(CLOCK_REALTIME, &rt) < 0 || clock_gettime(id, &t) < 0 ||
            clock_gettime(CLOCK_REALTIME, &rt2) < 0)
                return -errno;
        *ret_offset_ns =
                ((int64_t) rt.tv_sec - t.tv_sec) * 1000000000LL + (rt.tv_nsec - t.tv_nsec) +
                (((int64_t) rt2.tv_sec - rt.tv_sec) * 1000000000LL + (rt2.tv_nsec - rt.tv_nsec)) / 2;
        if (ret_clock)
                *ret_clock = TAKE_PTR(clock);
        return 0;
}

/* Sends the streams that asked for it a clock record when the offset of the trace clock to the wall
 * clock moved: stepped (the timerfd), or slewed by more than MANAGER_CLOCK_SLEW_NS (the check
 * timer), or after a change of the trace clock. */
#define MANAGER_CLOCK_SLEW_NS 100000LL

void manager_check_realtime(Manager *m, bool stepped) {
        _cleanup_free_ char *clock = NULL;
        int64_t offset;
        uint64_t ts;

        if (manager_realtime_offset(m, &offset, &clock) < 0)
                return;
        if (!stepped && llabs(offset - m->realtime_offset_ns) <= MANAGER_CLOCK_SLEW_NS)
                return;
        m->realtime_offset_ns = offset;
        /* The records read before the step go out with the offset before it. */
        manager_sync_decoding(m);
        ts = manager_trace_clock_now_ns(m);
        if (m->rings.n_readers > 0) {
                Batch *b;

                /* In every ring: each reader keeps it only if its stream asked for it. */
                if (stream_clock_line(ts, clock, offset, &b) >= 0) {
                        shm_rings_publish_line(&m->rings, RING_CLOCK, ts, b->buf.data, b->buf.len);
                        batch_unref(b);
                }
        }
        for (Peer *p = m->peers; p; p = p->next)
                if (p->stream && !p->shm && p->stream->realtime &&
                    stream_queue_clock(p->stream, ts, clock, offset) < 0)
                        log_debug("Peer %d: failed to queue a clock record.", (int) p->pid);
        manager_flush_peers(m);
}

static int manager_arm_clock_watch(Manager *m) {
        /* An expiry that never comes: only the cancellation on a clock change matters. */
        struct itimerspec its = { .it_value.tv_sec = (time_t) INT32_MAX * 2 };

        if (timerfd_settime(m->clock_fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &its, NULL) < 0)
                return -errno;
        return 0;
}

static int manager_on_clock_change(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;
        uint64_t expirations;

        /* ECANCELED: the wall clock was set. Either way the timer is armed again. */
        (void) read(fd, &expirations, sizeof(expirations));
        if (manager_arm_clock_watch(m) < 0)
                log_warning_errno(-errno, "Failed to watch the wall clock again: %m");
        manager_check_realtime(m, true);
        return 0;
}

int manager_watch_clock(Manager *m) {
        int r;

        (void) manager_realtime_offset(m, &m->realtime_offset_ns, NULL);
        m->clock_fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
        if (m->clock_fd < 0)
                return -errno;
        r = manager_arm_clock_watch(m);
        if (r < 0)
                return r;
        return sd_event_add_io(m->event, &m->clock_source, m->clock_fd, EPOLLIN, manager_on_clock_change, m);
}
