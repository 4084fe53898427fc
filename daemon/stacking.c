/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Streams whose records carry their kernel stacks (manager.h): the kernel's symbols, and the join of
 * a record to the stack record the kernel wrote after it when a read ended between the two. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "manager.h"

/* /proc/modules is looked at this often while stacks are wanted: a module loaded or unloaded
 * since moves the symbols. */
#define MODULES_CHECK_USEC (5 * 1000 * 1000ULL)

typedef struct StackHold {
        Batch *batch; /* referenced while a record of it waits */
        size_t index;
        uint8_t *raw; /* the record's payload: its page is gone once the batch was offered */
        size_t raw_cap;
        unsigned ticks; /* flush ticks it waited */
} StackHold;

/* Reads a /proc file whole (its size is unknown beforehand). */
static int read_proc(const char *path, char **ret, size_t *ret_size) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        _cleanup_free_ char *buf = NULL;
        size_t size = 0, cap = 0;

        if (fd < 0)
                return -errno;
        for (;;) {
                ssize_t n;

                if (cap - size < 65536) {
                        char *p = realloc(buf, cap + 1024 * 1024);
                        if (!p)
                                return -ENOMEM;
                        buf = p;
                        cap += 1024 * 1024;
                }
                n = read(fd, buf + size, cap - size - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                size += (size_t) n;
        }
        buf[size] = '\0';
        *ret = TAKE_PTR(buf);
        *ret_size = size;
        return 0;
}

static uint64_t modules_hash(void) {
        _cleanup_free_ char *text = NULL;
        uint64_t h = 0xcbf29ce484222325ULL;
        size_t size;

        if (read_proc("/proc/modules", &text, &size) < 0)
                return 0;
        for (size_t i = 0; i < size; i++)
                h = (h ^ (uint8_t) text[i]) * 0x100000001b3ULL;
        return h;
}

static int stacks_load(Manager *m) {
        _cleanup_free_ char *text = NULL;
        Ksyms k;
        size_t size;
        int r;

        m->stacks.modules_hash = modules_hash();
        r = read_proc("/proc/kallsyms", &text, &size);
        if (r < 0)
                return log_warning_errno(r, "Failed to read /proc/kallsyms: %m");
        r = ksyms_parse(&k, text, size);
        if (r == -ENODATA)
                return log_warning_errno(r, "/proc/kallsyms shows tpd no address (kernel.kptr_restrict): "
                                            "stacks cannot be named.");
        if (r < 0)
                return log_warning_errno(r, "Failed to parse /proc/kallsyms: %m");
        ksyms_done(&m->stacks.ksyms);
        m->stacks.ksyms = k;
        log_debug("Read %zu kernel symbols.", k.n_entries);
        return 0;
}

int manager_stacks_start(Manager *m) {
        int r;

        if (m->stacks.n > 0) {
                m->stacks.n++;
                return 0;
        }
        m->stacks.hold = calloc(m->n_cpus, sizeof(StackHold));
        if (!m->stacks.hold)
                return -ENOMEM;
        /* Read once and kept: a client that starts and ends stack streams in a loop must not make
         * tpd read 122,000 symbols (≈ 75 ms of its loop) each time; only a change of the modules
         * moves them. */
        r = m->stacks.ksyms.n_entries > 0 && modules_hash() == m->stacks.modules_hash ? 0 : stacks_load(m);
        if (r < 0) {
                m->stacks.hold = mfree(m->stacks.hold);
                return r;
        }
        m->stacks.n = 1;
        return 0;
}

size_t manager_stacks_name(Manager *m, uint64_t address, char *buf, size_t size) {
        return ksyms_name(&m->stacks.ksyms, address, buf, size);
}

static bool peer_wants_stacks(const Peer *p) {
        return p->stream && p->stream->stack && !p->recording && !p->aggregation;
}

/* The held record goes to the streams that want stacks, with its stack if it came. */
static void stacks_release(Manager *m, StackHold *h) {
        Batch *b = h->batch;
        int r;

        if (!b)
                return;
        for (Peer *p = m->peers; p; p = p->next)
                if (peer_wants_stacks(p)) {
                        r = stream_offer(p->stream, m->decoder, b, h->index);
                        if (r < 0)
                                log_warning_errno(r, "Peer %d: failed to queue a record: %m", (int) p->pid);
                }
        b->records[h->index].stack = NULL;
        b->records[h->index].raw = NULL;
        h->batch = NULL;
        /* Nobody reads its records any more: give them back, as manager_on_decoded() does. */
        if (b->refs > 1)
                batch_trim(b);
        batch_unref(b);
}

void manager_stacks_stop(Manager *m) {
        if (m->stacks.n == 0 || --m->stacks.n > 0)
                return;
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++) {
                StackHold *h = &m->stacks.hold[cpu];

                stacks_release(m, h);
                free(h->raw);
        }
        m->stacks.hold = mfree(m->stacks.hold);
}

bool manager_stacks_holds(const Manager *m, const Batch *b) {
        for (unsigned cpu = 0; m->stacks.hold && cpu < m->n_cpus; cpu++)
                if (m->stacks.hold[cpu].batch == b)
                        return true;
        return false;
}

/* Whether the batch's last record is one whose stack may still come: of an event a stack stream
 * selects, without its stack. */
static bool stacks_awaited(Manager *m, const Batch *b) {
        const Record *last = b->n_records > 0 ? &b->records[b->n_records - 1] : NULL;

        if (!last || last->kind != RECORD_EVENT || last->stack)
                return false;
        for (Peer *p = m->peers; p; p = p->next)
                if (peer_wants_stacks(p) && selection_has_event(&p->stream->selection, last->event_id))
                        return true;
        return false;
}

void manager_stacks_offer(Manager *m, unsigned cpu, Batch *b) {
        StackHold *h;
        size_t n = b->n_records;
        bool hold;
        int r;

        if (m->stacks.n == 0 || cpu >= m->n_cpus)
                return;
        h = &m->stacks.hold[cpu];
        /* A batch of losses alone (a report of the kernel's counters) brings no stack. */
        if (h->batch && (b->lead_stack || b->n_records > b->n_lost)) {
                Record *rec = &h->batch->records[h->index];

                if (b->lead_stack && b->lead_stack_pid == rec->pid) {
                        rec->stack = b->lead_stack;
                        rec->stack_size = b->lead_stack_size;
                        m->stacks.joined_late++;
                } else
                        m->stacks.unjoined++;
                stacks_release(m, h);
        }

        hold = stacks_awaited(m, b);
        if (hold)
                b->n_records--;
        for (Peer *p = m->peers; p; p = p->next)
                if (peer_wants_stacks(p)) {
                        r = stream_offer_batch(p->stream, m->decoder, b);
                        if (r < 0)
                                log_warning_errno(r, "Peer %d: failed to queue records: %m", (int) p->pid);
                }
        b->n_records = n;
        if (!hold)
                return;

        /* The record waits for the next read of its CPU, with a copy of its payload. */
        Record *rec = &b->records[n - 1];
        if (h->raw_cap < rec->raw_size) {
                uint8_t *p = realloc(h->raw, rec->raw_size);

                if (!p) {
                        /* Without room to wait, it goes now, without its stack. */
                        h->batch = batch_ref(b);
                        h->index = n - 1;
                        stacks_release(m, h);
                        return;
                }
                h->raw = p;
                h->raw_cap = rec->raw_size;
        }
        if (rec->raw_size > 0)
                memcpy(h->raw, rec->raw, rec->raw_size);
        rec->raw = h->raw;
        h->batch = batch_ref(b);
        h->index = n - 1;
        h->ticks = 0;
        m->stacks.held++;
}

void manager_stacks_tick(Manager *m) {
        uint64_t now = now_usec(CLOCK_MONOTONIC), hash;
        bool released = false;

        if (m->stacks.n == 0)
                return;
        /* A stack comes right after its record: one not read by the reads of a whole tick never
         * comes (it was lost, or the trigger went). */
        for (unsigned cpu = 0; cpu < m->n_cpus; cpu++)
                if (m->stacks.hold[cpu].batch && m->stacks.hold[cpu].ticks++ > 0) {
                        m->stacks.unjoined++;
                        stacks_release(m, &m->stacks.hold[cpu]);
                        released = true;
                }
        if (released)
                manager_flush_peers(m);
        if (now < m->stacks.checked_usec + MODULES_CHECK_USEC)
                return;
        m->stacks.checked_usec = now;
        hash = modules_hash();
        if (hash == m->stacks.modules_hash)
                return;
        log_debug("The kernel's modules changed: reading its symbols again.");
        if (stacks_load(m) >= 0)
                m->stacks.reloads++;
}
