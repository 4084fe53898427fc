/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdint.h>

/*
 * What tpd and tpctl share: the Varlink interface name, method and error ids, the default socket
 * path and the limits both sides enforce. Nothing else belongs here.
 */

#define TPD_SOCKET_DEFAULT "/run/tpd/io.tpd.tracing"
#define TPD_SOCKET_ENV "TPD_SOCKET"

#define TPD_INTERFACE "io.tpd.tracing"
#define TPD_METHOD(m) TPD_INTERFACE "." m

#define VARLINK_SERVICE "org.varlink.service"
#define VARLINK_METHOD_GET_INFO VARLINK_SERVICE ".GetInfo"
#define VARLINK_METHOD_GET_INTERFACE_DESCRIPTION VARLINK_SERVICE ".GetInterfaceDescription"

#define VARLINK_ERROR_INTERFACE_NOT_FOUND VARLINK_SERVICE ".InterfaceNotFound"
#define VARLINK_ERROR_METHOD_NOT_FOUND VARLINK_SERVICE ".MethodNotFound"
#define VARLINK_ERROR_INVALID_PARAMETER VARLINK_SERVICE ".InvalidParameter"
#define VARLINK_ERROR_PERMISSION_DENIED VARLINK_SERVICE ".PermissionDenied"
#define VARLINK_ERROR_EXPECTED_MORE VARLINK_SERVICE ".ExpectedMore"

#define TPD_ERROR_NO_SUCH_EVENT TPD_INTERFACE ".NoSuchEvent"
#define TPD_ERROR_INVALID_FILTER TPD_INTERFACE ".InvalidFilter"
#define TPD_ERROR_TRACEFS_UNAVAILABLE TPD_INTERFACE ".TracefsUnavailable"
#define TPD_ERROR_LIMIT_EXCEEDED TPD_INTERFACE ".LimitExceeded"

/* A control message (call or reply) larger than this closes the connection. */
#define TPD_MESSAGE_MAX (64U * 1024U)

/* Longest "system:event" name accepted; tracefs names are far shorter. */
#define TPD_EVENT_NAME_MAX 256U

/* Longest filter expression accepted, kernel-side or per stream. */
#define TPD_FILTER_MAX 4096U

/* Exit code of `tpctl stream` when the daemon went away mid-stream (EX_UNAVAILABLE). */
#define TPD_EXIT_DAEMON_GONE 69

/*
 * After the reply to a Record call the connection carries frames, not JSON: each a header in the
 * machine's byte order, then length bytes of payload. In order: FILE frames (the tracefs files a
 * trace-cmd data file needs), then PAGE, COMM, LOST and NOTICE frames as they come. The reply's
 * "frames" names the version of these frames; a client refuses one it does not know. A client that
 * ends a recording may shut down its sending side and read on: tpd then sends no more pages, sends
 * COMM frames for the pids it could not name yet whose names the kernel has by now, and closes the
 * connection (a tpd that predates this closes at once).
 */
#define TPD_FRAMES_VERSION 1

typedef struct TpdFrame {
        uint32_t type;
        uint32_t length; /* of the payload */
        uint32_t cpu;
        uint32_t arg; /* PAGE: records on the page; COMM: the pid; LOST: the cause (TPD_LOST_*, loss.h) */
} TpdFrame;

enum {
        /* A sub-buffer page of the CPU as the kernel writes it, holding only the records the
         * recording selected; its loss flags tell what was lost before it, tpd's losses included. */
        TPD_FRAME_PAGE = 1,
        /* A tracefs file: its path relative to the tracing directory, a NUL, its content. */
        TPD_FRAME_FILE = 2,
        /* The command name (no NUL) of pid "arg" when its first record was written, or a later one
         * (a rename, or a name found later); the last one sent for a pid holds. */
        TPD_FRAME_COMM = 3,
        /* Records lost before the CPU's next page: a u64 count, then the u64 time stamp. */
        TPD_FRAME_LOST = 4,
        /* A notice of tpd's, as a stream gets it: one JSON object, {"ts":…,"notice":…,"message":…}
         * (no newline). Version 1. */
        TPD_FRAME_NOTICE = 5,
};

/*
 * A stream with "transport":"shm" (see the Stream method): after the reply the records are in a
 * shared ring (core/ring.h) that the client maps read-only, and the connection carries only these
 * frames, each a TpdFrame header with length 8 and a u64 payload, cpu and arg 0. A client that has
 * read everything sends WAIT with the seq of the next entry it wants; tpd answers with WAKE, with
 * the ring's head_seq, as soon as that entry is published and holds something for the stream
 * (at once if it already is published). A client keeps one WAIT out: tpd queues at most one WAKE. Before a
 * WAIT the client may send STATS (length 16): the event records it delivered and those it lost as "client",
 * in total, which tpd shows as the stream's in GetStatus (it cannot see them itself). Anything else from the
 * client ends the stream; tpd's end of the stream is the end of the connection (EOF), after which the ring
 * still holds everything tpd published.
 */
enum {
        TPD_FRAME_WAIT = 6,
        TPD_FRAME_WAKE = 7,
        TPD_FRAME_STATS = 8,
};

/*
 * A stream of NDJSON over the socket takes one frame from its client: SYNC, a TpdFrame header of
 * type 9 with length, cpu and arg 0. tpd reads every CPU's buffer then, routes what it read, and
 * queues the notice {"ts":…,"notice":"sync","message":…} after it: every record written before the
 * client sent SYNC that the stream selects comes before that line. `tpctl stream -- CMD` ends so
 * once CMD exits. A recording's client may send it too: the notice comes as a NOTICE frame after
 * the pages (`tpctl record -- CMD`). Anything else from the client is discarded, as before this
 * frame.
 */
enum {
        TPD_FRAME_SYNC = 9,
};

/* A STATS frame, header and payload. */
typedef struct TpdStatsFrame {
        TpdFrame header;
        uint64_t delivered;
        uint64_t lost_client;
} TpdStatsFrame;

_Static_assert(sizeof(TpdStatsFrame) == 32, "stats frame");

/* A WAIT or WAKE frame, header and payload. */
typedef struct TpdSeqFrame {
        TpdFrame header;
        uint64_t seq;
} TpdSeqFrame;

_Static_assert(sizeof(TpdSeqFrame) == 24, "seq frame");

/* A frame larger than this is a broken stream. */
#define TPD_FRAME_MAX (64U * 1024U * 1024U)
