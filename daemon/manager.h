/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-event.h>

#include "comm.h"
#include "decode.h"
#include "reader.h"
#include "tracing.h"

/*
 * The manager owns the daemon's parts and the data flow between them: readers hand it pages, the
 * decoder turns them into a batch, and the manager offers each record of the batch to every
 * stream, then lets the clients write. It also carries the settings and the daemon-wide counters.
 */

typedef struct Client Client;
typedef struct Server Server;

/* Readers wake when this share of the ring buffer holds full pages: 0 would wake on every event
 * (and make a blocking splice return at once), 50, the kernel's default, lets a slow stream wait
 * for half the buffer. At 10 (35 pages of the default 1410 KiB) each wake-up moves a batch large
 * enough that fan-out to 8 streams costs 1.5× one stream instead of 2.5× at 1 (tests/bench), and
 * the flush timer still delivers a slow stream within its interval. */
#define MANAGER_BUFFER_PERCENT_DEFAULT 10U

typedef struct ManagerConfig {
        char *socket_path;
        char *instance;
        char *clock;
        unsigned buffer_size_kb;    /* 0: keep the kernel's default */
        unsigned buffer_percent;
        unsigned flush_interval_ms;
        unsigned max_clients;
        unsigned client_queue_kb;
        char *access_group;
        char *state_dir; /* pins are saved here; NULL: not saved */
        char **events;   /* Events=: pinned at every start */
        char **events_origin; /* "file:line" of each, for error messages */
} ManagerConfig;

typedef struct Manager {
        ManagerConfig config;

        sd_event *event;
        sd_event_source *flush_timer;
        sd_event_source *status_timer;
        uint64_t status_usec;    /* when the last STATUS= was sent */
        uint64_t status_records; /* records decoded until then */

        Tracing *tracing;
        Decoder *decoder;
        CommCache *comm;
        Reader **readers;
        unsigned n_cpus;
        uint64_t *overrun_reported; /* per CPU: overrun already reported in lost records */
        uint64_t *dropped_reported; /* per CPU: the kernel's "dropped events" likewise */
        uint64_t *decode_pending;   /* per CPU: records lost to a failed decode, not yet reported */
        uint64_t decode_warned_usec;

        char *state_path;

        Server *server;
        Client *clients;
        unsigned n_clients;
        unsigned n_streams;
        gid_t access_gid;
        bool access_gid_valid;

        Batch *batch; /* reused while no client holds a part of it */

        uint64_t delivered;   /* records queued to streams that have ended */
        uint64_t lost_client; /* likewise */
} Manager;

void manager_config_done(ManagerConfig *c);
int manager_new(const ManagerConfig *config, Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);

/* Creates the instance and readers, applies the settings, starts listening (on fd if >= 0). */
int manager_start(Manager *m, int listen_fd);
int manager_run(Manager *m);

/* Saves the pinned events and their filters, to be restored at the next start. */
int manager_save_state(Manager *m);

/* Counts a new stream, and wakes the flush timer that sleeps while there is none. */
void manager_stream_started(Manager *m);

/* Writes what every stream has queued; used after records were offered. */
void manager_flush_clients(Manager *m);
