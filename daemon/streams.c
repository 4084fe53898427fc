/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Stream and Record: a call's selection checked and built, its events held, its following set up,
 * and the stream handed to the connection (daemon/streams.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "access.h"
#include "aggregating.h"
#include "calls.h"
#include "cgroups.h"
#include "core/cgroup.h"
#include "log.h"
#include "ratelimit.h"
#include "streams.h"
#include "tpd-protocol.h"

#define API_PIDS_MAX 1024U
/* Pids a following stream holds at once, its roots among them: a fork bomb under it finds no room
 * past this, and its children are not followed (GetStatus "follow_refused" counts them). */
#define API_FOLLOW_MAX 16384U
#define API_CPUS_MAX 4096U

static int64_t boot_to_realtime_ns(void) {
        struct timespec rt, bt;

        clock_gettime(CLOCK_REALTIME, &rt);
        clock_gettime(CLOCK_BOOTTIME, &bt);
        return ((int64_t) rt.tv_sec - bt.tv_sec) * 1000000000LL + (rt.tv_nsec - bt.tv_nsec);
}

/* What a reply to Stream and Record says of time: the trace clock, its offsets to the wall clock
 * (realtime_offset_ns when the system has the clock in use), and the trace clock's time now. */
static void reply_clock(Manager *m, json_object *p, int *r) {
        _cleanup_free_ char *clock = NULL;
        int64_t offset;

        (void) tracing_get_clock(m->tracing, &clock);
        json_set(r, p, "clock", json_object_new_string(clock ?: "boot"));
        json_set(r, p, "boot_to_realtime_ns", json_object_new_int64(boot_to_realtime_ns()));
        if (manager_realtime_offset(m, &offset, NULL) >= 0)
                json_set(r, p, "realtime_offset_ns", json_object_new_int64(offset));
        json_set(r, p, "ts", json_object_new_int64((int64_t) manager_trace_clock_now_ns(m)));
}

static void release_holds(Manager *m, TracingEvent **held, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (tracing_event_unref(m->tracing, held[i]) < 0)
                        log_warning("Failed to disable '%s' after a failed Stream.", held[i]->name);
}

/* A Stream or Record call's parameters. */
typedef struct StreamParams {
        char **events;
        size_t n_events;
        int64_t *pids;
        size_t n_pids;
        int64_t *cpus;
        size_t n_cpus;
        const char *filter;
        bool print;
        bool symbolic;
        bool realtime;
        const char *transport; /* "socket" or "shm"; NULL: socket */
        bool follow;
        const char *cgroup; /* a cgroup v2 subtree's tasks */
        char **with;        /* what records carry beyond their fields: "cgroup" */
        size_t n_with;
        bool stack; /* the records' kernel stacks */
} StreamParams;

#define STREAM_PARAM(f) offsetof(StreamParams, f)

static const CallParam stream_params[] = {
        { "events", CALL_PARAM_STRINGS, STREAM_PARAM(events), STREAM_PARAM(n_events), API_EVENTS_MAX },
        { "pids", CALL_PARAM_INTS, STREAM_PARAM(pids), STREAM_PARAM(n_pids), API_PIDS_MAX, 0, INT32_MAX },
        { "cpus", CALL_PARAM_CPUS, STREAM_PARAM(cpus), STREAM_PARAM(n_cpus), API_CPUS_MAX },
        { "filter", CALL_PARAM_STRING, STREAM_PARAM(filter), 0, TPD_FILTER_MAX },
        { "print", CALL_PARAM_BOOL, STREAM_PARAM(print) },
        { "symbolic", CALL_PARAM_BOOL, STREAM_PARAM(symbolic) },
        { "realtime", CALL_PARAM_BOOL, STREAM_PARAM(realtime) },
        { "transport", CALL_PARAM_STRING, STREAM_PARAM(transport), 0, 16 },
        { "follow", CALL_PARAM_BOOL, STREAM_PARAM(follow) },
        { "cgroup", CALL_PARAM_STRING, STREAM_PARAM(cgroup), 0, CGROUP_PATH_MAX },
        { "with", CALL_PARAM_STRINGS, STREAM_PARAM(with), STREAM_PARAM(n_with), 8 },
        { "stack", CALL_PARAM_BOOL, STREAM_PARAM(stack) },
};

static void stream_params_done(StreamParams *p) {
        free(p->events);
        free(p->pids);
        free(p->cpus);
        free(p->with);
}

/* What a Stream or Record call set up: its stream (a recording's head), and the events it holds for
 * its lifetime. */
typedef struct StreamSetup {
        Stream *stream;
        Recording *recording;
        TracingEvent **events; /* selected by name; the held ones */
        size_t n_events;
        bool filtered;
        bool print;
        bool transport; /* the call named one */
        bool shm;       /* and it was "shm" */
        bool follow;    /* the pids' descendants too (lineage.h): over the socket */
        bool cgroup;    /* its records carry their task's cgroup (attributing.c): the same */
        bool stack;     /* its records carry their kernel stacks (stacking.c): the same */
} StreamSetup;

/* Drops the stacktrace triggers of the first n events. */
static void release_stacks(Manager *m, TracingEvent **events, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (tracing_event_stack(m->tracing, events[i], false) < 0)
                        log_warning("Failed to remove the stacktrace trigger of '%s'.", events[i]->name);
}

/* The stacks of the stream's events: the kernel's symbols read (once for all such streams; a
 * recording's reader names them), and the stacktrace trigger set on each. Returns 0, 1 when an
 * error reply was queued, or a negative errno. */
static int stream_setup_stacks(Manager *m, Peer *peer, bool recording, TracingEvent **events, size_t n) {
        bool names = !recording;
        TracingEvent *stack_event;
        size_t i;
        int r;

        /* The decoders need its format to know its records. */
        r = tracing_event_get(m->tracing, "ftrace:kernel_stack", &stack_event);
        if (r < 0) {
                r = tracefs_error(peer, r, "read the format of ftrace:kernel_stack");
                return r < 0 ? r : 1;
        }
        r = names ? manager_stacks_start(m) : 0;
        if (r < 0) {
                r = peer_errorf(peer, TPD_ERROR_TRACEFS_UNAVAILABLE, "reason", "kallsyms",
                                "tpd cannot read the kernel's symbols (/proc/kallsyms) to name stacks: %s",
                                strerror(-r));
                return r < 0 ? r : 1;
        }
        for (i = 0; i < n; i++) {
                r = tracing_event_stack(m->tracing, events[i], true);
                if (r < 0)
                        break;
        }
        if (i == n)
                return 0;
        release_stacks(m, events, i);
        if (names)
                manager_stacks_stop(m);
        r = tracefs_error(peer, r, "set the stacktrace trigger");
        return r < 0 ? r : 1;
}

static void stream_setup_done(Manager *m, StreamSetup *st, bool release) {
        if (release) {
                if (st->stack) {
                        release_stacks(m, st->events, st->n_events);
                        if (!st->recording)
                                manager_stacks_stop(m);
                }
                release_holds(m, st->events, st->n_events);
                if (st->follow)
                        manager_follow_stop(m);
                if (st->cgroup)
                        manager_attribution_stop(m);
        }
        if (st->recording)
                st->recording = recording_free(st->recording);
        else
                stream_free(st->stream);
        st->stream = NULL;
        st->events = mfree(st->events);
        st->n_events = 0;
}

/* The events a call names; with none, a recording's are those enabled now (its file describes the
 * events it holds). Returns 0, 1 when an error reply was queued, or a negative errno. */
static int stream_setup_events(Manager *m, Peer *peer, const StreamParams *p, bool recording,
                               TracingEvent ***ret, size_t *ret_n) {
        _cleanup_free_ TracingEvent **events = NULL;
        TracingEvent *const *known;
        size_t n = 0, n_known;
        int r;

        if (p->n_events > 0) {
                r = resolve_events(m, peer, p->events, p->n_events, true, ret, ret_n);
                return r < 0 ? r : r > 0;
        }
        if (!recording)
                return 0;
        known = tracing_events(m->tracing, &n_known);
        events = calloc(n_known + 1, sizeof(TracingEvent *));
        if (!events)
                return -ENOMEM;
        for (size_t i = 0; i < n_known; i++)
                /* tpd's own holds are no one's to record. */
                if (known[i]->enabled && !known[i]->always_on && !tracing_event_hidden(known[i]))
                        events[n++] = known[i];
        if (n == 0) {
                r = peer_errorf(peer, TPD_ERROR_NO_SUCH_EVENT, "event", "",
                                "No event is enabled: name the events to record.");
                return r < 0 ? r : 1;
        }
        /* Selected all the same: a member's implicit selection obeys MaxCallEvents= too. */
        r = check_call_events(m, peer, n);
        if (r != 0)
                return r < 0 ? r : 1;
        *ret = TAKE_PTR(events);
        *ret_n = n;
        return 0;
}

/* Builds the stream's selection (selection_build()) and replies to a filter it refuses. Without
 * named events the filter covers the events enabled now for which it makes sense; records of
 * others do not pass it. Returns 0, 1 when an error reply was queued, or a negative errno. */
static int stream_setup_selection(Manager *m, Peer *peer, const StreamParams *p, TracingEvent **events,
                                  size_t n, Selection *sel) {
        size_t n_known, n_others = 0;
        TracingEvent *const *known = tracing_events(m->tracing, &n_known);
        _cleanup_free_ struct tep_event **formats = calloc(MAX(n, n_known) + 1, sizeof(struct tep_event *));
        _cleanup_free_ TracingEvent **others = calloc(n_known + 1, sizeof(TracingEvent *));
        SelectionError err = {};
        TracingEvent *bad;
        int r;

        if (!formats || !others)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                formats[i] = events[i]->format;
        for (size_t i = 0; n == 0 && p->filter && i < n_known; i++)
                if (known[i]->enabled) {
                        others[n_others] = known[i];
                        formats[n_others++] = known[i]->format;
                }

        r = selection_build(sel,
                            &(SelectionSpec){ .tep = tracing_tep(m->tracing),
                                              .events = formats,
                                              .n_events = n,
                                              .others = formats,
                                              .n_others = n_others,
                                              .pids = p->pids,
                                              .n_pids = p->n_pids,
                                              .follow_max = p->follow || p->cgroup ? API_FOLLOW_MAX : 0,
                                              .cgroup = p->cgroup,
                                              .cpus = p->cpus,
                                              .n_cpus = p->n_cpus,
                                              .filter = p->filter,
                                              .print = p->print },
                            &err);
        if (r != -EINVAL)
                return r;
        bad = err.event == SIZE_MAX ? NULL : n > 0 ? events[err.event] : others[err.event];
        if (err.failure == SELECTION_FILTER_INVALID)
                r = peer_errorf(peer, TPD_ERROR_INVALID_FILTER, "event", bad->name,
                                "Invalid filter for '%s': %s", bad->name, strempty(err.message));
        else
                r = peer_errorf(peer, TPD_ERROR_INVALID_FILTER, "event", bad ? bad->name : "",
                                "Invalid stream filter: %s",
                                err.message ?: "it applies to no enabled event");
        free(err.message);
        return r < 0 ? r : 1;
}

/* Holds the named events for the stream's lifetime. The holds go to the connection only once the
 * stream is set up: a call that fails on the way must leave the connection as it was. Returns 0, 1
 * when an error reply was queued, or a negative errno. */
static int stream_setup_hold(Manager *m, Peer *p, TracingEvent **events, size_t n, StreamSetup *st) {
        int r = 0;

        st->events = calloc(n + 1, sizeof(TracingEvent *));
        if (!st->events)
                return -ENOMEM;
        for (size_t i = 0; i < n && r >= 0; i++) {
                r = tracing_event_ref(m->tracing, events[i]);
                if (r >= 0)
                        st->events[st->n_events++] = events[i];
        }
        if (r < 0) {
                release_holds(m, st->events, st->n_events);
                st->n_events = 0;
                r = tracefs_error(p, r, "enable the event");
                return r < 0 ? r : 1;
        }
        return 0;
}

/* A cgroup named must be a path of the v2 hierarchy that exists, alone: a stream selects by pids
 * or by a cgroup. Returns 0, 1 when an error reply was queued, or a negative errno. */
static int stream_check_cgroup(Peer *peer, const StreamParams *p) {
        _cleanup_free_ char *mount = NULL, *dir = NULL;
        struct stat st;
        int r;

        if (!p->cgroup)
                return 0;
        if (p->n_pids > 0 || p->follow)
                r = peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "cgroup",
                                "A stream selects by \"pids\" (and \"follow\") or by \"cgroup\", not both.");
        else if (!cgroup_path_valid(p->cgroup))
                r = peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "cgroup",
                                "\"cgroup\" is a path of the cgroup v2 hierarchy as /proc/PID/cgroup "
                                "shows it after \"0::\", like /system.slice/ssh.service.");
        else if ((r = cgroups_mount(&mount)) < 0)
                r = peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "cgroup",
                                "No cgroup v2 hierarchy is mounted here.");
        else if (asprintf(&dir, "%s%s", mount, p->cgroup) < 0)
                return -ENOMEM;
        else if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
                r = peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "cgroup",
                                "No cgroup '%s' in the cgroup v2 hierarchy.", p->cgroup);
        else
                return 0;
        return r < 0 ? r : 1;
}

/* "with" names what records carry beyond their fields: "cgroup" only, for now. Sets
 * stream->cgroup. Returns 0, 1 when an error reply was queued, or a negative errno. */
static int stream_check_with(Peer *peer, const StreamParams *p, bool *ret_cgroup) {
        for (size_t i = 0; i < p->n_with; i++) {
                if (streq(p->with[i], "cgroup")) {
                        *ret_cgroup = true;
                        continue;
                }
                return peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "with",
                                   "Records carry nothing named '%s': \"with\" takes \"cgroup\".",
                                   p->with[i]) < 0
                               ? -ENOMEM
                               : 1;
        }
        return 0;
}

/* Parses a Stream or Record call's selection, checks it, and sets up its stream (a recording) and
 * holds. Returns 0 with *ret set, 1 when an error reply was queued, or a negative errno. */
static int stream_setup(Manager *m, Peer *peer, const VarlinkCall *call, const char *const *keys,
                        StreamMode mode, bool recording, StreamSetup *ret) {
        /* Absent (or null) "symbolic": the configuration's default, for streams of records. */
        _cleanup_(stream_params_done) StreamParams p = { .symbolic = !recording && m->config.symbolic };
        _cleanup_free_ TracingEvent **events = NULL;
        size_t n = 0, max_bytes = (size_t) m->config.client_queue_kb * 1024;
        StreamSetup st = {};
        bool with_cgroup = false, stacks;
        int r;

        if (check_keys(peer, call, keys) < 0)
                return 1;
        r = call_params_parse(m, peer, call, stream_params, ELEMENTSOF(stream_params), &p);
        if (r != 0)
                return r;
        if (p.transport && !streq(p.transport, "socket") && !streq(p.transport, "shm"))
                return peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "transport",
                                   "Unknown transport '%s': \"socket\" or \"shm\".", p.transport) < 0
                               ? -ENOMEM
                               : 1;
        if (p.follow && p.n_pids == 0)
                return peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "follow",
                                   "\"follow\" follows the pids named in \"pids\": name at least one.") < 0
                               ? -ENOMEM
                               : 1;
        r = stream_check_cgroup(peer, &p);
        if (r == 0)
                r = stream_check_with(peer, &p, &with_cgroup);
        /* A recording's stacks are the kernel's addresses, which its reader names. */
        if (r == 0 && p.stack && recording && !access_kernel_addresses(&m->access, peer))
                r = peer_errorf(peer, VARLINK_ERROR_PERMISSION_DENIED, "parameter", "stack",
                                "A recording's stacks are kernel addresses: only root records them "
                                "(KernelAddresses=yes lets members too). \"tpctl stream --stack\" "
                                "names the frames.") < 0
                            ? -ENOMEM
                            : 1;
        if (r == 0 && p.stack && p.n_events == 0)
                r = peer_errorf(
                            peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "stack",
                            "\"stack\" sets the kernel's stacktrace trigger on the events it names: name "
                            "them.") < 0
                            ? -ENOMEM
                            : 1;
        if (r != 0)
                return r;
        r = access_check_stream(&m->access, m->peers, m->n_streams, peer);
        if (r != 0)
                return r < 0 ? r : 1;
        r = stream_setup_events(m, peer, &p, recording, &events, &n);
        if (r != 0)
                return r;

        if (recording) {
                r = recording_new(m->n_cpus, max_bytes, &st.recording);
                if (r >= 0)
                        st.stream = &st.recording->stream;
        } else
                r = stream_new(mode, m->n_cpus, max_bytes, &st.stream);
        if (r < 0)
                return r;
        st.stream->symbolic = p.symbolic;
        st.stream->realtime = p.realtime;
        r = stream_setup_selection(m, peer, &p, events, n, &st.stream->selection);
        /* The trigger before the enable: every record of an event enabled for this stream has its
         * stack (a trigger on a disabled event records nothing). */
        if (r == 0 && p.stack)
                r = stream_setup_stacks(m, peer, recording, events, n);
        stacks = r == 0 && p.stack;
        if (r == 0)
                r = stream_setup_hold(m, peer, events, n, &st);
        if (r == 0 && (p.follow || p.cgroup)) {
                r = manager_follow_start(m);
                if (r >= 0)
                        manager_follow_seed(m, &st.stream->selection);
                if (r < 0) {
                        release_holds(m, st.events, st.n_events);
                        r = tracefs_error(peer, r, "follow forks (sched:sched_process_fork)");
                        r = r < 0 ? r : 1;
                }
        }
        if (r == 0 && with_cgroup) {
                r = manager_attribution_start(m);
                if (r < 0) {
                        release_holds(m, st.events, st.n_events);
                        if (p.follow || p.cgroup)
                                manager_follow_stop(m);
                        r = tracefs_error(peer, r, "follow the tasks' cgroups (cgroup:cgroup_attach_task)");
                        r = r < 0 ? r : 1;
                }
        }
        if (r != 0) {
                if (stacks) {
                        release_stacks(m, events, n);
                        if (!recording)
                                manager_stacks_stop(m);
                }
                stream_setup_done(m, &st, false);
                return r;
        }
        st.stack = p.stack;
        st.stream->stack = p.stack;
        st.follow = p.follow || p.cgroup;
        st.cgroup = with_cgroup;
        st.stream->cgroup = with_cgroup;
        st.filtered = p.filter != NULL;
        st.print = p.print;
        st.transport = p.transport != NULL;
        st.shm = p.transport && streq(p.transport, "shm");
        *ret = st;
        return 0;
}

/* The stream is running: the connection takes it over, and its holds. */
static void stream_setup_commit(Manager *m, Peer *p, StreamSetup *st, bool upgraded) {
        p->held = TAKE_PTR(st->events);
        p->n_held = st->n_events;
        p->stream = TAKE_PTR(st->stream);
        p->recording = TAKE_PTR(st->recording);
        p->upgraded = upgraded;
        manager_stream_started(m);
}

/* A stream that asked for the shared-memory transport gets a ring's reader when tpd can make one;
 * else it streams over its socket, and the reply says so. */
static ShmReader *stream_setup_shm(Manager *m, Peer *peer, const VarlinkCall *call, StreamSetup *st,
                                   ShmReply *ret) {
        ShmReader *rd = NULL;
        int r;

        /* Whom a following stream selects changes with each fork, and lines with a cgroup are made
         * for each stream: a reader of the ring could see neither. */
        if (!st->shm || st->follow || st->cgroup || st->stack || !call->upgrade || !m->config.shm_transport)
                return NULL;
        r = shm_reader_new(&m->rings, st->stream, peer, &rd);
        if (r >= 0) {
                r = shm_reader_reply(rd, ret);
                if (r < 0)
                        rd = shm_reader_free(rd);
        }
        if (r < 0) {
                /* Any member may ask again and again: at most a few warnings a minute. */
                static RateLimit limit = RATELIMIT_INIT(60 * 1000 * 1000ULL, 3);

                if (ratelimit_below(&limit))
                        log_warning_errno(r,
                                          "Peer %d: cannot hand out a shared-memory ring, streaming over "
                                          "the socket: %m",
                                          (int) peer->pid);
        }
        return rd;
}

/* The reply's "transport", "ring" and "page": the fds go with the reply, by index. */
static void stream_reply_transport(json_object *p, const StreamSetup *st, const ShmReader *rd,
                                   const ShmReply *sr, int *r) {
        json_object *ring, *page;

        if (!st->transport)
                return;
        json_set(r, p, "transport", json_object_new_string(rd ? "shm" : "socket"));
        if (!rd)
                return;
        ring = json_object_new_object();
        json_set(r, ring, "fd", json_object_new_int(0));
        json_set(r, ring, "size", json_object_new_int64((int64_t) sr->ring_size));
        json_set(r, ring, "start", json_object_new_int64((int64_t) sr->start));
        json_set(r, ring, "start_seq", json_object_new_int64((int64_t) sr->start_seq));
        json_set(r, p, "ring", ring);
        page = json_object_new_object();
        json_set(r, page, "fd", json_object_new_int(1));
        json_set(r, page, "size", json_object_new_int64((int64_t) sr->page_size));
        json_set(r, p, "page", page);
}

int streams_method_stream(Manager *m, Peer *peer, const VarlinkCall *call) {
        static const char *const keys[] = { "events",   "pids",     "cpus",      "filter", "print",
                                            "symbolic", "realtime", "transport", "follow", "cgroup",
                                            "with",     "stack",    NULL };
        StreamSetup st = {};
        ShmReply sr = { .fds = { -1, -1 } };
        ShmReader *rd;
        json_object *p;
        size_t n_pids;
        int r;

        if (!call->more && !call->upgrade)
                return peer_errorf(peer, VARLINK_ERROR_EXPECTED_MORE, NULL, NULL,
                                   "Stream needs \"more\" or \"upgrade\" set in the call.");
        r = stream_setup(m, peer, call, keys, call->upgrade ? STREAM_RAW : STREAM_MORE, false, &st);
        if (r != 0)
                return r < 0 ? r : 0;

        /* Batches the decode workers still hold were read before this stream: they must not reach
         * its ring or queue, decoded for the streams before it. */
        manager_sync_decoding(m);
        p = json_object_new_object();
        /* The offset is what the stream's clock records update. */
        reply_clock(m, p, &r);
        json_set(&r, p, "flush_interval_ms", json_object_new_int((int) m->config.flush_interval_ms));
        json_set(&r, p, "cpus", json_object_new_int((int) m->n_cpus));
        rd = stream_setup_shm(m, peer, call, &st, &sr);
        stream_reply_transport(p, &st, rd, &sr, &r);
        if (r >= 0 && rd)
                r = peer_reply_with_fds(peer, p, sr.fds, 2);
        else if (r >= 0)
                r = call->upgrade ? peer_reply(peer, p) : peer_reply_more(peer, p);
        else {
                json_object_put(p);
                if (rd) {
                        safe_close(sr.fds[0]);
                        safe_close(sr.fds[1]);
                }
        }
        if (r < 0) {
                shm_reader_free(rd);
                stream_setup_done(m, &st, true);
                return r;
        }
        peer->shm = rd;

        n_pids = st.stream->selection.n_pids;
        log_debug("Peer %d: stream started (%zu events, %zu pids%s).", (int) peer->pid, st.n_events, n_pids,
                  st.filtered ? ", filtered" : "");
        stream_setup_commit(m, peer, &st, call->upgrade);
        return 0;
}

/* Queues a FILE frame: the path, a NUL, the content. */
static int record_queue_file(Recording *rec, const char *path, const char *text, size_t size) {
        return recording_queue_frame(rec, TPD_FRAME_FILE, 0, 0, path, strlen(path) + 1, text, size);
}

/* The tracefs files a trace-cmd data file needs: the page and entry headers, the formats of the
 * recorded events, printk formats, saved command lines and the clock. tpd reads only these fixed
 * names; the peer writes its file itself, as the calling user. printk_formats pairs kernel
 * addresses with strings: it goes only to root, or to everyone with KernelAddresses=yes (the
 * other files hold no addresses: layouts, print formats, names, the clock). Every file is charged
 * to the recording's queue: -ENOBUFS when they do not fit. */
static int record_queue_files(Manager *m, StreamSetup *st, bool kernel_addresses) {
        TracingEvent *const *known;
        size_t n_known;
        int r;

        for (size_t i = 0; tracing_meta_files[i]; i++) {
                _cleanup_free_ char *text = NULL;
                size_t size;

                if (!kernel_addresses && streq(tracing_meta_files[i], "printk_formats"))
                        continue;
                r = tracing_read_meta(m->tracing, i, &text, &size);
                if (r < 0) {
                        /* Old kernels lack some of them; the peer writes what it gets. */
                        log_debug_errno(r, "Failed to read %s for a recording: %m", tracing_meta_files[i]);
                        continue;
                }
                r = record_queue_file(st->recording, tracing_meta_files[i], text, size);
                if (r < 0)
                        return r;
        }
        /* The recorded events' formats, and every ftrace event's, as trace-cmd records them (its
         * library also needs at least one of those). */
        known = tracing_events(m->tracing, &n_known);
        for (size_t i = 0; i < n_known + st->n_events; i++) {
                TracingEvent *e = i < n_known ? known[i] : st->events[i - n_known];
                _cleanup_free_ char *path = NULL, *text = NULL;
                size_t size;

                if (i < n_known ? !e->always_on : e->always_on)
                        continue;
                r = tracing_event_format(m->tracing, e, &path, &text, &size);
                if (r < 0)
                        return r;
                r = record_queue_file(st->recording, path, text, size);
                if (r < 0)
                        return r;
        }
        return 0;
}

int streams_method_record(Manager *m, Peer *peer, const VarlinkCall *call) {
        static const char *const keys[] = { "events", "pids",   "cpus",  "filter",
                                            "follow", "cgroup", "stack", NULL };
        StreamSetup st = {};
        json_object *p, *names;
        int r;

        if (!call->upgrade)
                return peer_errorf(peer, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "upgrade",
                                   "Record sends pages, not JSON: it needs \"upgrade\" set in the call.");
        r = stream_setup(m, peer, call, keys, STREAM_RAW, true, &st);
        if (r != 0)
                return r < 0 ? r : 0;
        /* The files go first: a recording cannot do without them. */
        r = record_queue_files(m, &st, access_kernel_addresses(&m->access, peer));
        if (r == -ENOBUFS) {
                stream_setup_done(m, &st, true);
                return peer_errorf(peer, TPD_ERROR_LIMIT_EXCEEDED, "limit", "client_queue",
                                   "The files a recording starts with (the events' formats, the kernel's "
                                   "saved command lines) do not fit its queue (StreamQueueKB=%u): record "
                                   "fewer events, or raise StreamQueueKB=.",
                                   m->config.client_queue_kb);
        }
        if (r < 0) {
                stream_setup_done(m, &st, true);
                return tracefs_error(peer, r, "read the files a recording needs");
        }

        p = json_object_new_object();
        names = json_object_new_array();
        for (size_t i = 0; i < st.n_events; i++)
                json_push(&r, names, json_object_new_string(st.events[i]->name));
        reply_clock(m, p, &r);
        json_set(&r, p, "page_size", json_object_new_int64((int64_t) tracing_page_size(m->tracing)));
        json_set(&r, p, "cpus", json_object_new_int((int) m->n_cpus));
        json_set(&r, p, "flush_interval_ms", json_object_new_int64(m->config.flush_interval_ms));
        json_set(&r, p, "events", names);
        json_set(&r, p, "frames", json_object_new_int(TPD_FRAMES_VERSION));
        r = call_reply(peer, p, r);
        if (r < 0) {
                stream_setup_done(m, &st, true);
                return r;
        }
        log_debug("Peer %d: recording started (%zu events%s).", (int) peer->pid, st.n_events,
                  st.filtered ? ", filtered" : "");
        stream_setup_commit(m, peer, &st, true);
        return 0;
}

/* Aggregate: a stream like Stream's, whose records go to an aggregation instead of its queue. */
int streams_method_aggregate(Manager *m, Peer *peer, const VarlinkCall *call) {
        static const char *const keys[] = { "kind",   "events",      "field",       "key",  "by",
                                            "linear", "interval_ms", "duration_ms", "pids", "cpus",
                                            "filter", "follow",      "cgroup",      NULL };
        _cleanup_(aggregation_freep) Aggregation *a = NULL;
        StreamSetup st = {};
        json_object *events;
        int r;

        if (!call->more)
                return peer_errorf(peer, VARLINK_ERROR_EXPECTED_MORE, NULL, NULL,
                                   "Aggregate needs \"more\" set in the call.");
        if (check_keys(peer, call, keys) < 0)
                return 0;
        if (!json_object_object_get_ex(call->parameters, "events", &events) ||
            !json_object_is_type(events, json_type_array) || json_object_array_length(events) == 0)
                return invalid_parameter(peer, "events") < 0 ? -ENOMEM : 0;
        r = aggregation_parse(m, peer, call, &a);
        if (r != 0)
                return r < 0 ? r : 0;
        r = stream_setup(m, peer, call, keys, STREAM_MORE, false, &st);
        if (r != 0)
                return r < 0 ? r : 0;
        r = aggregation_bind(a, peer, st.events, st.n_events);
        if (r != 0) {
                stream_setup_done(m, &st, true);
                return r < 0 ? r : 0;
        }
        /* Batches the workers hold were read before it. */
        manager_sync_decoding(m);
        r = aggregation_start(a, m, peer);
        if (r < 0) {
                stream_setup_done(m, &st, true);
                return r;
        }
        peer->aggregation = TAKE_PTR(a);
        log_debug("Peer %d: aggregation started (%zu events).", (int) peer->pid, st.n_events);
        stream_setup_commit(m, peer, &st, false);
        return 0;
}
