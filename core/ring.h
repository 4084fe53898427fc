/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/encode.h"

/*
 * The shared-memory ring of the planned local transport (not used yet): one writer appends
 * entries (NDJSON lines with a binary header) over memory it maps read-write; each reader maps
 * the same memory read-only, keeps its own position and copies entries out, then checks that the
 * writer had not yet overwritten what it copied. The writer never waits for a reader: one that
 * falls a ring behind is told to resync. Pure code: the caller hands in the memory.
 *
 * Everything in the mapping is fixed-size and in native byte order, and laid out the same for a
 * 32-bit reader and a 64-bit writer (the offsets are asserted below). The shared fields are
 * accessed with the __atomic builtins rather than <stdatomic.h>: an _Atomic uint64_t need not have
 * the size and alignment of a uint64_t (on i386 it is 8-aligned in a struct, a uint64_t 4), so an
 * _Atomic field would change the layout between the two ends; the builtins work on plain fields.
 *
 * Not here yet: the header's log of the last notices and clock entries, and the per-reader page
 * of exact losses; the header keeps room for the log (zeros from RING_HEADER_RESERVED_AT).
 */

#define RING_MAGIC "TPDRING" /* 8 bytes with its NUL */
#define RING_VERSION 1
#define RING_HEADER_SIZE 4096
#define RING_DATA_SIZE_MIN 4096
#define RING_ALIGN 8

enum {
        RING_EVENT = 1,
        RING_LOST = 2, /* kind: TPD_LOST_* (loss.h) */
        RING_NOTICE = 3,
        RING_CLOCK = 4,
        RING_PAD = 5, /* fills the end of the data area; only size and type mean anything */
        _RING_TYPE_MAX,
};

enum {
        RING_STATE_LIVE = 0,
        RING_STATE_CLOSED = 1,  /* the writer stopped normally */
        RING_STATE_RETIRED = 2, /* no stream uses the ring any more */
};

/* The header page, written by the writer only. The fields from gen to state change as entries
 * are published; gen is a seqcount, odd while they do. Positions are byte counts since the
 * start (monotonic, never wrapped): a position p lives at data offset p & (data_size - 1). */
typedef struct RingHeader {
        char magic[8];
        uint32_t version;
        uint32_t header_size;
        uint64_t data_size; /* a power of two */
        uint32_t variant;   /* DECODER_VARIANT_* bits of the lines (decode.h) */
        uint32_t n_cpus;
        uint32_t clock; /* the trace clock's id (clock.h) */
        uint32_t gen;
        uint64_t head; /* after the last published entry */
        uint64_t head_seq;
        uint64_t oldest; /* the first intact entry; moved before the writer overwrites */
        uint64_t oldest_seq;
        uint64_t last_batch; /* the start of the newest publish */
        uint64_t last_batch_seq;
        uint64_t publish; /* publishes so far */
        uint32_t state;   /* RING_STATE_* */
        uint32_t reserved0;
        uint8_t reserved[RING_HEADER_SIZE - 104];
} RingHeader;

#define RING_HEADER_RESERVED_AT 104

_Static_assert(sizeof(RingHeader) == RING_HEADER_SIZE, "ring header is one page");
_Static_assert(offsetof(RingHeader, version) == 8, "layout");
_Static_assert(offsetof(RingHeader, data_size) == 16, "layout");
_Static_assert(offsetof(RingHeader, gen) == 36, "layout");
_Static_assert(offsetof(RingHeader, head) == 40, "layout");
_Static_assert(offsetof(RingHeader, oldest) == 56, "layout");
_Static_assert(offsetof(RingHeader, last_batch) == 72, "layout");
_Static_assert(offsetof(RingHeader, publish) == 88, "layout");
_Static_assert(offsetof(RingHeader, state) == 96, "layout");
_Static_assert(offsetof(RingHeader, reserved) == RING_HEADER_RESERVED_AT, "layout");

/* An entry's header. size is the whole entry, padding included, a multiple of 8; a LOST entry
 * carries a RingLost after it; then line_len bytes of the line and zeros up to size. */
typedef struct RingEntry {
        uint32_t size;
        uint8_t type;
        uint8_t kind;
        uint16_t event_id;
        uint32_t cpu;
        int32_t pid;
        uint64_t seq; /* every entry but PAD, from 0 */
        uint64_t ts;
        uint32_t line_len;
        uint32_t flags;
} RingEntry;

typedef struct RingLost {
        uint64_t lost;
        uint64_t lost_base;
} RingLost;

_Static_assert(sizeof(RingEntry) == 40, "entry header");
_Static_assert(offsetof(RingEntry, cpu) == 8, "layout");
_Static_assert(offsetof(RingEntry, seq) == 16, "layout");
_Static_assert(offsetof(RingEntry, ts) == 24, "layout");
_Static_assert(offsetof(RingEntry, line_len) == 32, "layout");
_Static_assert(sizeof(RingLost) == 16, "lost entry");

/* The largest entry of a ring of data_size: an entry never wraps, and a publish of half the ring
 * always holds at least a few. */
static inline uint64_t ring_entry_max(uint64_t data_size) {
        return data_size / 8;
}

/* One entry as the writer takes it and a reader gets it: the line lies outside the ring (the
 * writer's batch, the reader's private copy, valid only during the callback). */
typedef struct RingItem {
        uint8_t type; /* RING_EVENT … RING_CLOCK */
        uint8_t kind;
        uint16_t event_id;
        uint32_t cpu;
        int32_t pid;
        uint32_t flags;
        uint64_t seq; /* given by the writer */
        uint64_t ts;
        uint64_t lost; /* RING_LOST */
        uint64_t lost_base;
        const char *line;
        uint32_t line_len;
} RingItem;

/* The writer's own state; the header in the mapping is a copy others read. */
typedef struct RingWriter {
        RingHeader *header;
        uint8_t *data;
        uint64_t data_size;
        uint64_t head, head_seq;
        uint64_t oldest, oldest_seq;
        uint64_t publish;
} RingWriter;

/* The size a mapping needs for data_size bytes of entries. */
static inline size_t ring_mapping_size(uint64_t data_size) {
        return RING_HEADER_SIZE + (size_t) data_size;
}

/* Lays out an empty ring over mem (size bytes: the header page and a power of two, at least
 * RING_DATA_SIZE_MIN); mem must be 8-byte aligned. -EINVAL for another size. */
int ring_writer_init(RingWriter *w, void *mem, size_t size, uint32_t variant, uint32_t n_cpus,
                     uint32_t clock);

/* Appends items as entries and publishes them, in several publishes when they take more than half
 * the ring. An item larger than ring_entry_max() is left out and counted in *ret_refused (may be
 * NULL). Returns the number of entries written. */
size_t ring_append(RingWriter *w, const RingItem *items, size_t n_items, size_t *ret_refused);

/* The same for a batch's records, with their plain lines (offset, length): a lost record becomes
 * a LOST entry of its cause. */
size_t ring_append_batch(RingWriter *w, const Batch *b, size_t *ret_refused);

void ring_writer_set_state(RingWriter *w, uint32_t state);

/* ring_read()'s expected outcome besides 0: the reader fell a ring behind (what it copied was
 * overwritten meanwhile) and must ring_resync(). */
#define RING_READ_RESYNC 1

typedef int (*RingDeliverFn)(void *userdata, const RingItem *item);

typedef struct RingReader {
        uint64_t data_size; /* from the header at ring_reader_init(), never read again */
        uint64_t pos, seq;  /* the next entry to read */
        uint8_t *buf;       /* the private copy: [u64 position][entry]… */
        size_t buf_size;
        size_t copied;     /* bytes of buf filled by ring_copy() */
        uint64_t copy_end; /* position and seq after the copied entries */
        uint64_t copy_seq;
        bool copy_bad;    /* ring_copy() met bytes that make no entry */
        uint64_t skipped; /* entries passed over by ring_resync(), in total */
} RingReader;

/* Checks the header of a mapping of size bytes and positions the reader at the head, so that it
 * gets what is published next. -EINVAL: not a ring of this version, or larger than size. */
int ring_reader_init(RingReader *r, const void *mem, size_t size);
void ring_reader_done(RingReader *r);
/* Moves the reader to an entry boundary (the start position a stream's reply gives). */
void ring_reader_seek(RingReader *r, uint64_t pos, uint64_t seq);

/* Copies the entries from the reader's position up to the head (or as many as fit its buffer)
 * into private memory. Always 0: any inconsistency is judged by ring_validate(). */
int ring_copy(RingReader *r, const void *mem);
/* Whether the copy is intact: 0, RING_READ_RESYNC if the writer had moved its oldest entry past
 * the copy's start, -EBADMSG if the copy made no sense although nothing was overwritten. */
int ring_validate(RingReader *r, const void *mem);
/* Hands the copied entries to deliver in order and moves past them; a negative return of
 * deliver stops there and is returned. */
int ring_deliver(RingReader *r, RingDeliverFn deliver, void *userdata);

/* ring_copy(), ring_validate() and ring_deliver(): 0 with *ret_n (may be NULL) entries delivered,
 * RING_READ_RESYNC (nothing delivered), or a negative errno. */
int ring_read(RingReader *r, const void *mem, RingDeliverFn deliver, void *userdata, size_t *ret_n);

/* After RING_READ_RESYNC: moves the reader to the newest publish and returns the number of
 * entries passed over (also added to r->skipped). -EBADMSG if the header makes no sense,
 * -EAGAIN if it never held still (the caller tries again later). */
int64_t ring_resync(RingReader *r, const void *mem);

/* The ring's state (RING_STATE_*), read atomically. */
uint32_t ring_state(const void *mem);
