/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <string.h>

#include "core/decode.h"
#include "core/page.h"
#include "core/recording.h"
#include "loss.h"
#include "tpd-protocol.h"
#include "util.h"

/*
 * Frames of raw pages, never decoded. A page goes out as the kernel wrote it, less the records the
 * recording did not select; what it lost before a page (the kernel's overruns and dropped events,
 * its own full queue) is flagged on that page as the kernel flags overruns, so that trace-cmd
 * reports it, and counted exactly in LOST frames.
 */

Recording *recording_free(Recording *rec) {
        if (!rec)
                return NULL;
        stream_done(&rec->stream);
        free(rec->missed);
        free(rec->overrun_seen);
        free(rec->stack_pid);
        free(rec->comm_pids);
        free(rec->scratch);
        free(rec->notice);
        free(rec);
        return NULL;
}

int recording_new(unsigned n_cpus, size_t max_bytes, Recording **ret) {
        Recording *rec = calloc(1, sizeof(Recording));
        int r;

        if (!rec)
                return -ENOMEM;
        r = stream_init(&rec->stream, STREAM_RAW, n_cpus, max_bytes);
        if (r < 0) {
                free(rec);
                return r;
        }
        rec->comm_key = hash_key_new();
        for (unsigned i = 0; rec->stack_pid && i < n_cpus; i++)
                rec->stack_pid[i] = -1;
        rec->missed = calloc(n_cpus, sizeof(uint64_t));
        rec->overrun_seen = calloc((size_t) n_cpus * 2, sizeof(uint64_t));
        rec->stack_pid = malloc(n_cpus * sizeof(int32_t));
        if (!rec->missed || !rec->overrun_seen || !rec->stack_pid) {
                recording_free(rec);
                return -ENOMEM;
        }
        *ret = rec;
        return 0;
}

int recording_set_base(Recording *rec, unsigned cpu, uint64_t overrun, uint64_t dropped) {
        int r = stream_set_base(&rec->stream, cpu, overrun, dropped);

        if (r < 0)
                return r;
        rec->overrun_seen[cpu * 2] = overrun;
        rec->overrun_seen[cpu * 2 + 1] = dropped;
        return 0;
}

/* What a recording holds: its queue, and its table of the names it sent. */
static size_t recording_held(const Recording *rec) {
        return rec->stream.queue.held + rec->comm_pids_cap * sizeof(RecordingComm);
}

/* Large frames (files) get a buffer of their own; small ones share the stream's chunks. */
#define RECORDING_FRAME_OWN_MAX (STREAM_CHUNK_SIZE / 4)

int recording_queue_frame(Recording *rec, uint32_t type, uint32_t cpu, uint32_t arg, const void *a,
                          size_t na, const void *b, size_t nb) {
        TpdFrame f = { .type = type, .length = (uint32_t) (na + nb), .cpu = cpu, .arg = arg };
        size_t length = sizeof(f) + na + nb;
        Stream *s = &rec->stream;
        bool own = length > RECORDING_FRAME_OWN_MAX;
        uint32_t offset;
        char *p;
        int r;

        if (na + nb > TPD_FRAME_MAX)
                return -E2BIG;
        /* Charged as queue_push_text() and queue_push_own() charge it: the frame's memory. */
        if (recording_held(rec) + length + (own ? sizeof(Batch) : 0) > s->max_bytes)
                return -ENOBUFS;
        r = queue_reserve(&s->queue, 1);
        if (r < 0)
                return r;
        p = own ? malloc(length) : stream_own_append(s, length, &offset);
        if (!p)
                return -ENOMEM;
        memcpy(p, &f, sizeof(f));
        if (na > 0)
                memcpy(p + sizeof(f), a, na);
        if (nb > 0)
                memcpy(p + sizeof(f) + na, b, nb);
        if (own)
                return queue_push_text(&s->queue, p, length);
        return queue_push_own(&s->queue, s->own, offset, (uint32_t) length);
}

/* A LOST frame carries the protocol's first four causes only: "unknown" goes as "client". */
static uint32_t lost_cause(int kind) {
        return kind <= TPD_LOST_DECODE ? (uint32_t) kind : TPD_LOST_CLIENT;
}

/* A frame that still finds no room stays pending (drops_pending), and so does the rest. */
int recording_report_losses(Recording *rec) {
        Stream *s = &rec->stream;
        int r;

        if (!s->drops_pending)
                return 0;
        if (rec->notice) {
                r = recording_queue_frame(rec, TPD_FRAME_NOTICE, 0, 0, rec->notice, strlen(rec->notice),
                                          NULL, 0);
                if (r == -ENOBUFS)
                        return 0;
                if (r < 0)
                        return r;
                rec->notice = mfree(rec->notice);
        }
        for (unsigned cpu = 0; cpu < s->n_cpus; cpu++)
                for (size_t i = 0; i < STREAM_LOSS_KINDS; i++) {
                        int kind = stream_loss_order[i];
                        uint64_t *n = stream_carried(s, cpu, kind);
                        uint64_t payload[2];

                        if (*n == 0)
                                continue;
                        payload[0] = *n;
                        payload[1] = *stream_carried_ts(s, cpu, kind);
                        r = recording_queue_frame(rec, TPD_FRAME_LOST, cpu, lost_cause(kind), payload,
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

int recording_queue_notice(Recording *rec, uint64_t ts, const char *notice, const char *message) {
        Batch *b;
        int r;

        r = stream_notice_object(ts, notice, message, &b);
        if (r < 0)
                return r;
        r = jsonbuf_reserve(&b->buf, 1);
        if (r >= 0) {
                jsonbuf_putc(&b->buf, '}');
                r = recording_report_losses(rec);
        }
        if (r >= 0 && !rec->stream.drops_pending)
                r = recording_queue_frame(rec, TPD_FRAME_NOTICE, 0, 0, b->buf.data, b->buf.len, NULL, 0);
        else if (r >= 0)
                r = -ENOBUFS;
        if (r == -ENOBUFS) {
                char *text = strndup(b->buf.data, b->buf.len);

                r = text ? 0 : -ENOMEM;
                if (text) {
                        free(rec->notice);
                        rec->notice = text;
                        rec->stream.drops_pending = true;
                }
        }
        batch_unref(b);
        return r;
}

/* Counts a loss on cpu: flagged on the recording's next page, and reported in a LOST frame. */
static void recording_loss(Recording *rec, unsigned cpu, int kind, uint64_t count, uint64_t ts) {
        Stream *s = &rec->stream;

        if (count == 0 || cpu >= s->n_cpus)
                return;
        if (count == UINT64_MAX || rec->missed[cpu] == UINT64_MAX)
                rec->missed[cpu] = UINT64_MAX;
        else
                rec->missed[cpu] += count;
        if (count == UINT64_MAX)
                return; /* the flag says it; there is no count to report */
        *stream_carried(s, cpu, kind) += count;
        *stream_carried_ts(s, cpu, kind) = ts;
        if (kind == TPD_LOST_CLIENT)
                s->lost_client += count;
        s->drops_pending = true;
}

void recording_note_kernel_losses(Recording *rec, unsigned cpu, uint64_t overrun, uint64_t dropped,
                                  uint64_t ts) {
        uint64_t *seen;

        if (rec->finished || cpu >= rec->stream.n_cpus)
                return;
        /* The losses of a CPU the recording did not select are not its own. */
        if (!selection_has_cpu(&rec->stream.selection, cpu))
                return;
        seen = &rec->overrun_seen[cpu * 2];
        if (overrun > seen[0])
                recording_loss(rec, cpu, TPD_LOST_OVERRUN, overrun - seen[0], ts);
        if (dropped > seen[1])
                recording_loss(rec, cpu, TPD_LOST_DROPPED, dropped - seen[1], ts);
        seen[0] = MAX(seen[0], overrun);
        seen[1] = MAX(seen[1], dropped);
}

/* The command names sent, by pid, in an open-addressing table: a name goes out for a pid's first
 * record and again when it changes (exec, prctl), so that the file ends with each pid's last name,
 * as trace-cmd's files do. The table is charged to the recording like its queue and takes at most
 * half of the recording's bound (65,536 pids with the default StreamQueueKB=); beyond that, the
 * kernel's saved command lines (sent at the start) have to do. The hash is keyed per recording:
 * pids a user forks until they agree modulo the table size do not line up in one long probe. Names
 * from the daemon's comm cache, one lookup per run of records of a pid on a page. */
#define RECORDING_COMM_PIDS_MAX 65536U

/* The slot of pid, NULL when the table is full; a new slot has key 0 and is not counted yet. */
static RecordingComm *recording_comm_slot(Recording *rec, int32_t pid) {
        uint32_t key = (uint32_t) pid + 1, h;

        if (rec->n_comm_pids * 2 >= rec->comm_pids_cap) {
                size_t cap = rec->comm_pids_cap ? rec->comm_pids_cap * 2 : 256;
                unsigned bits = (unsigned) __builtin_ctzll(cap);
                RecordingComm *t;

                if (cap > RECORDING_COMM_PIDS_MAX * 2 ||
                    cap * sizeof(RecordingComm) > rec->stream.max_bytes / 2)
                        return NULL;
                t = calloc(cap, sizeof(RecordingComm));
                if (!t)
                        return NULL;
                for (size_t i = 0; i < rec->comm_pids_cap; i++) {
                        uint32_t k = rec->comm_pids[i].key;
                        if (k == 0)
                                continue;
                        for (h = hash_bucket(rec->comm_key, k, bits); t[h].key; h = (h + 1) & (cap - 1))
                                ;
                        t[h] = rec->comm_pids[i];
                }
                free(rec->comm_pids);
                rec->comm_pids = t;
                rec->comm_pids_cap = cap;
        }
        for (h = hash_bucket(rec->comm_key, key, (unsigned) __builtin_ctzll(rec->comm_pids_cap));
             rec->comm_pids[h].key; h = (h + 1) & (rec->comm_pids_cap - 1))
                if (rec->comm_pids[h].key == key)
                        break;
        return &rec->comm_pids[h];
}

/* Sends pid's name. With the queue full it is not sent, and not noted as sent: the pid's next
 * record (or the next look, see recording_resolve_comms()) tries again. */
static int recording_comm_send(Recording *rec, RecordingComm *slot, unsigned cpu, int32_t pid,
                               const char *comm) {
        size_t len = strnlen(comm, sizeof(slot->comm));
        int r;

        r = recording_queue_frame(rec, TPD_FRAME_COMM, cpu, (uint32_t) pid, comm, len, NULL, 0);
        if (r == -ENOBUFS)
                return 0;
        if (r < 0)
                return r;
        memset(slot->comm, 0, sizeof(slot->comm));
        memcpy(slot->comm, comm, len);
        return 0;
}

/* Queues a COMM frame for the record's pid if its name is new to the recording. A new pid is
 * looked at again by recording_resolve_comms() for a while. */
static int recording_send_comm(Recording *rec, Decoder *d, unsigned cpu, int32_t pid, uint64_t ts) {
        const char *comm = decoder_comm(d, pid, ts);
        RecordingComm *slot = recording_comm_slot(rec, pid);

        if (!slot)
                return 0;
        if (slot->key == 0) {
                slot->key = (uint32_t) pid + 1;
                slot->ts = ts;
                rec->n_comm_pids++;
                rec->n_comm_checking++;
        }
        if (!comm || strncmp(slot->comm, comm, sizeof(slot->comm)) == 0)
                return 0;
        return recording_comm_send(rec, slot, cpu, pid, comm);
}

/* Flush ticks a new pid's name is looked at again: the kernel's table is reread every ten. */
#define RECORDING_COMM_TRIES 30U

/* Looks at a pid's name again, as of its first record, and sends it when it changed. */
static int recording_comm_recheck(Recording *rec, Decoder *d, RecordingComm *slot) {
        int32_t pid = (int32_t) (slot->key - 1);
        const char *comm = decoder_comm(d, pid, slot->ts);

        if (!comm || strncmp(slot->comm, comm, sizeof(slot->comm)) == 0)
                return 0;
        return recording_comm_send(rec, slot, 0, pid, comm);
}

int recording_resolve_comms(Recording *rec, Decoder *d) {
        if (rec->finished || rec->n_comm_checking == 0)
                return 0;
        for (size_t i = 0; i < rec->comm_pids_cap && rec->n_comm_checking > 0; i++) {
                RecordingComm *slot = &rec->comm_pids[i];
                int r;

                if (slot->key == 0 || slot->tries >= RECORDING_COMM_TRIES)
                        continue;
                if (++slot->tries >= RECORDING_COMM_TRIES)
                        rec->n_comm_checking--;
                r = recording_comm_recheck(rec, d, slot);
                if (r < 0)
                        return r;
        }
        return 0;
}

int recording_finish(Recording *rec, Decoder *d) {
        if (rec->finished)
                return 0;
        rec->finished = true;
        /* At most RECORDING_COMM_PIDS_MAX lookups, once per recording. */
        for (size_t i = 0; i < rec->comm_pids_cap; i++) {
                RecordingComm *slot = &rec->comm_pids[i];
                int r;

                if (slot->key == 0 || (slot->comm[0] && slot->tries >= RECORDING_COMM_TRIES))
                        continue;
                r = recording_comm_recheck(rec, d, slot);
                if (r < 0)
                        return r;
        }
        rec->n_comm_checking = 0;
        return 0;
}

typedef struct PageKeepContext {
        Recording *rec;
        Decoder *d;
        unsigned cpu;
        int32_t last_pid; /* of the last record kept: a run of one pid is named once */
        bool names;       /* the page may go out: send the names of its pids */
        int error;
} PageKeepContext;

static bool recording_page_keep(void *userdata, const PageEntry *e) {
        PageKeepContext *k = userdata;
        Record r = {
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
        memcpy(&r.pid, e->payload + 4, 4);
        r.event_id = id;
        /* A stack goes with the record it follows, which this walk (or the CPU's last) kept. */
        if (k->rec->stream.stack && (int) id == decoder_stack_id(k->d)) {
                bool keep = k->rec->stack_pid[k->cpu] == r.pid;

                k->rec->stack_pid[k->cpu] = -1;
                return keep;
        }
        k->rec->stack_pid[k->cpu] = -1;
        if (!selection_matches(&k->rec->stream.selection, k->d, &r))
                return false;
        k->rec->stack_pid[k->cpu] = r.pid;
        if (k->names && k->error >= 0 && r.pid > 0 && r.pid != k->last_pid)
                k->error = recording_send_comm(k->rec, k->d, k->cpu, r.pid, r.ts);
        k->last_pid = r.pid;
        return true;
}

int recording_offer_pages(Recording *rec, Decoder *d, const PageSource *src, const void *pages,
                          size_t n_pages) {
        size_t frame = sizeof(TpdFrame) + src->page_size;
        unsigned cpu = src->cpu;
        int queued = 0;

        if (rec->finished || cpu >= rec->stream.n_cpus || !selection_has_cpu(&rec->stream.selection, cpu))
                return 0;
        if (rec->scratch_size < frame) {
                uint8_t *p = realloc(rec->scratch, frame);
                if (!p)
                        return -ENOMEM;
                rec->scratch = p;
                rec->scratch_size = frame;
        }

        for (size_t i = 0; i < n_pages; i++) {
                const uint8_t *page = (const uint8_t *) pages + i * src->page_size;
                uint8_t *out = rec->scratch + sizeof(TpdFrame);
                /* A page that cannot go out needs no names: it is only counted. */
                PageKeepContext k = { .rec = rec,
                                      .d = d,
                                      .cpu = cpu,
                                      .last_pid = -1,
                                      .names = recording_held(rec) + frame <= rec->stream.max_bytes };
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
                                recording_note_kernel_losses(rec, cpu, now, rec->overrun_seen[cpu * 2 + 1],
                                                             ts);
                        else
                                recording_loss(rec, cpu, TPD_LOST_OVERRUN, flagged, ts);
                }

                kept = page_filter(page, src->page_size, recording_page_keep, &k, out, &walked);
                if (kept == -EBADMSG) {
                        /* What the page held past the fault cannot be counted record by record. */
                        uint64_t left = page_records(page, src->page_size);
                        recording_loss(rec, cpu, TPD_LOST_DECODE,
                                       MAX(left > walked ? left - walked : 0, (uint64_t) 1), ts);
                        kept = (int) page_records(out, src->page_size);
                }
                if (k.error < 0)
                        return k.error;
                if (kept <= 0)
                        continue;
                if (recording_held(rec) + frame > rec->stream.max_bytes) {
                        recording_loss(rec, cpu, TPD_LOST_CLIENT, (uint64_t) kept, w.page_ts);
                        continue;
                }

                /* The page's own flags were copied; what this stream lost replaces them. */
                {
                        uint64_t commit;
                        memcpy(&commit, out + 8, 8);
                        commit &= ~(PAGE_MISSED_EVENTS | PAGE_MISSED_STORED);
                        memcpy(out + 8, &commit, 8);
                }
                page_add_missed(out, src->page_size, rec->missed[cpu]);
                r = recording_report_losses(rec);
                if (r < 0)
                        return r;
                /* Losses (and a notice) not reported for want of room go before any later page. */
                if (rec->stream.drops_pending || recording_held(rec) + frame > rec->stream.max_bytes) {
                        recording_loss(rec, cpu, TPD_LOST_CLIENT, (uint64_t) kept, w.page_ts);
                        continue;
                }

                f = (TpdFrame){ .type = TPD_FRAME_PAGE,
                                .length = (uint32_t) src->page_size,
                                .cpu = cpu,
                                .arg = (uint32_t) kept };
                memcpy(rec->scratch, &f, sizeof(f));
                r = queue_reserve(&rec->stream.queue, 1);
                if (r >= 0) {
                        uint32_t offset;
                        char *copy = stream_own_append(&rec->stream, frame, &offset);

                        r = copy ? 0 : -ENOMEM;
                        if (copy) {
                                memcpy(copy, rec->scratch, frame);
                                r = queue_push_own(&rec->stream.queue, rec->stream.own, offset,
                                                   (uint32_t) frame);
                        }
                }
                if (r == -ENOMEM) {
                        recording_loss(rec, cpu, TPD_LOST_CLIENT, (uint64_t) kept, w.page_ts);
                        continue;
                }
                if (r < 0)
                        return r;
                rec->missed[cpu] = 0;
                rec->pages++;
                rec->stream.delivered += (uint64_t) kept;
                queued += kept;
        }
        return queued;
}
