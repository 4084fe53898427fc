/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * The causes of lost records: the "cause" of a lost record's line (docs/design.md), the kind of a
 * lost record in a batch (core/encode.h) and the "arg" of a LOST frame (tpd-protocol.h). The
 * values up to TPD_LOST_DECODE are the protocol's and never change; a LOST frame carries only
 * those.
 */
enum {
        TPD_LOST_OVERRUN = 1, /* the kernel overwrote them before tpd read them */
        TPD_LOST_DROPPED = 2, /* the kernel dropped them: the buffer was full with overwrite off */
        TPD_LOST_CLIENT = 3,  /* the stream's queue had no room (or no memory) for them */
        TPD_LOST_DECODE = 4,  /* a page or record tpd could not walk */
        TPD_LOST_UNKNOWN = 5, /* an event id without a format tpd knows */
        TPD_LOST_EXPORT = 6,  /* tpctl export's buffer had no room for them */
        _TPD_LOST_MAX,
};

/* The cause's name as a lost record's "cause" says it; NULL for a value that is no cause. */
const char *tpd_lost_cause_name(int cause);
