/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A recording's command names: the COMM frames of core/stream.c's recordings, kept apart from
 * its pages and losses. */
#include <stdlib.h>
#include <string.h>

#include "core/decode.h"
#include "core/stream.h"
#include "tpd-protocol.h"
#include "util.h"

/* The command names sent, by pid, in an open-addressing table: a name goes out for a pid's first
 * record and again when it changes (exec, prctl), so that the file ends with each pid's last name,
 * as trace-cmd's files do. The table is charged to the recording like its queue and takes at most
 * half of the recording's bound (65,536 pids with the default StreamQueueKB=); beyond that, the
 * kernel's saved command lines (sent at the start) have to do. The hash is keyed per stream: pids a
 * user forks until they agree modulo the table size do not line up in one long probe. Names come
 * from the daemon's comm cache, one lookup per run of records of a pid on a page. */
#define STREAM_COMM_PIDS_MAX 65536U

/* The slot of pid, NULL when the table is full; a new slot has key 0 and is not counted yet. */
static StreamComm *stream_comm_slot(Stream *s, int32_t pid) {
        uint32_t key = (uint32_t) pid + 1, h;

        if (s->n_comm_pids * 2 >= s->comm_pids_cap) {
                size_t cap = s->comm_pids_cap ? s->comm_pids_cap * 2 : 256;
                unsigned bits = (unsigned) __builtin_ctzll(cap);
                StreamComm *t;

                if (cap > STREAM_COMM_PIDS_MAX * 2 || cap * sizeof(StreamComm) > s->max_bytes / 2)
                        return NULL;
                t = calloc(cap, sizeof(StreamComm));
                if (!t)
                        return NULL;
                for (size_t i = 0; i < s->comm_pids_cap; i++) {
                        uint32_t k = s->comm_pids[i].key;
                        if (k == 0)
                                continue;
                        for (h = hash_bucket(s->comm_key, k, bits); t[h].key; h = (h + 1) & (cap - 1))
                                ;
                        t[h] = s->comm_pids[i];
                }
                free(s->comm_pids);
                s->comm_pids = t;
                s->comm_pids_cap = cap;
        }
        for (h = hash_bucket(s->comm_key, key, (unsigned) __builtin_ctzll(s->comm_pids_cap));
             s->comm_pids[h].key; h = (h + 1) & (s->comm_pids_cap - 1))
                if (s->comm_pids[h].key == key)
                        break;
        return &s->comm_pids[h];
}

/* Sends pid's name. With the queue full it is not sent, and not noted as sent: the pid's next
 * record (or the next look, see stream_resolve_comms()) tries again. */
static int stream_comm_send(Stream *s, StreamComm *slot, unsigned cpu, int32_t pid, const char *comm) {
        size_t len = strnlen(comm, sizeof(slot->comm));
        int r;

        r = stream_queue_frame(s, TPD_FRAME_COMM, cpu, (uint32_t) pid, comm, len, NULL, 0);
        if (r == -ENOBUFS)
                return 0;
        if (r < 0)
                return r;
        memset(slot->comm, 0, sizeof(slot->comm));
        memcpy(slot->comm, comm, len);
        return 0;
}

/* Queues a COMM frame for the record's pid if its name is new to the recording. A new pid is
 * looked at again by stream_resolve_comms() for a while. */
int stream_send_comm(Stream *s, Decoder *d, unsigned cpu, int32_t pid, uint64_t ts) {
        const char *comm = decoder_comm(d, pid, ts);
        StreamComm *slot = stream_comm_slot(s, pid);

        if (!slot)
                return 0;
        if (slot->key == 0) {
                slot->key = (uint32_t) pid + 1;
                slot->ts = ts;
                s->n_comm_pids++;
                s->n_comm_checking++;
        }
        if (!comm || strncmp(slot->comm, comm, sizeof(slot->comm)) == 0)
                return 0;
        return stream_comm_send(s, slot, cpu, pid, comm);
}

/* Flush ticks a new pid's name is looked at again: the kernel's table is reread every ten. */
#define STREAM_COMM_TRIES 30U

/* Looks at a pid's name again, as of its first record, and sends it when it changed. */
static int stream_comm_recheck(Stream *s, Decoder *d, StreamComm *slot) {
        int32_t pid = (int32_t) (slot->key - 1);
        const char *comm = decoder_comm(d, pid, slot->ts);

        if (!comm || strncmp(slot->comm, comm, sizeof(slot->comm)) == 0)
                return 0;
        return stream_comm_send(s, slot, 0, pid, comm);
}

int stream_resolve_comms(Stream *s, Decoder *d) {
        if (s->mode != STREAM_PAGES || s->finished || s->n_comm_checking == 0)
                return 0;
        for (size_t i = 0; i < s->comm_pids_cap && s->n_comm_checking > 0; i++) {
                StreamComm *slot = &s->comm_pids[i];
                int r;

                if (slot->key == 0 || slot->tries >= STREAM_COMM_TRIES)
                        continue;
                if (++slot->tries >= STREAM_COMM_TRIES)
                        s->n_comm_checking--;
                r = stream_comm_recheck(s, d, slot);
                if (r < 0)
                        return r;
        }
        return 0;
}

int stream_finish(Stream *s, Decoder *d) {
        if (s->mode != STREAM_PAGES || s->finished)
                return 0;
        s->finished = true;
        /* At most STREAM_COMM_PIDS_MAX lookups, once per recording. */
        for (size_t i = 0; i < s->comm_pids_cap; i++) {
                StreamComm *slot = &s->comm_pids[i];
                int r;

                if (slot->key == 0 || (slot->comm[0] && slot->tries >= STREAM_COMM_TRIES))
                        continue;
                r = stream_comm_recheck(s, d, slot);
                if (r < 0)
                        return r;
        }
        s->n_comm_checking = 0;
        return 0;
}
