/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/encode.h"
#include "core/stream.h"

/*
 * The shared-memory ring of the local transport (daemon/rings.c, client/shm.c): one writer appends
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
 * Each reader also maps a page of its own, written by the writer only (RingPageHeader): what its
 * stream selects of the entries and how many it selected, so that a reader that fell behind knows
 * exactly what it lost (core/ring-page.c).
 *
 * Not here yet: the header's log of the last notices and clock entries; the header keeps room for
 * it (zeros from RING_HEADER_RESERVED_AT).
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

/* One publish, as the writer tells on_publish before the header shows it: items [first, end) of
 * the caller's array or batch became the entries of seqs [seq, end_seq), but for `refused` of them,
 * too large for an entry, which took no seq. */
typedef struct RingPublish {
        uint64_t publish;
        uint64_t seq, end_seq;
        size_t first, end;
        size_t refused;
} RingPublish;

typedef void (*RingPublishFn)(void *userdata, const RingPublish *p);

/* The writer's own state; the header in the mapping is a copy others read. */
typedef struct RingWriter {
        RingHeader *header;
        uint8_t *data;
        uint64_t data_size;
        uint64_t head, head_seq;
        uint64_t oldest, oldest_seq;
        uint64_t publish;
        /* Called at each publish, once its entries are written and before the header shows them:
         * where the reader pages are updated (ring_page_publish()). */
        RingPublishFn on_publish;
        void *userdata;
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
/* The same with each event's variant line (decoder_encode_variant(): print_offset), where it has
 * one. */
size_t ring_append_batch_variant(RingWriter *w, const Batch *b, size_t *ret_refused);
/* Whether record i of b fits an entry of a ring of data_size (ring_append_batch() refuses it if
 * not). */
bool ring_batch_entry_fits(uint64_t data_size, const Batch *b, size_t i);

void ring_writer_set_state(RingWriter *w, uint32_t state);

/* ring_read()'s expected outcome besides 0: the reader fell a ring behind (what it copied was
 * overwritten meanwhile) and must ring_resync(). */
#define RING_READ_RESYNC 1

typedef int (*RingDeliverFn)(void *userdata, const RingItem *item);

typedef struct RingPageReader RingPageReader;

typedef struct RingReader {
        uint64_t data_size; /* from the header at ring_reader_init(), never read again */
        uint64_t pos, seq;  /* the next entry to read */
        uint8_t *buf;       /* the private copy: [u64 position][entry]… */
        size_t buf_size;
        size_t copied;     /* bytes of buf filled by ring_copy() */
        uint64_t copy_end; /* position and seq after the copied entries */
        uint64_t copy_seq;
        bool copy_bad;        /* ring_copy() met bytes that make no entry */
        uint64_t skipped;     /* entries passed over by ring_resync(), in total */
        RingPageReader *page; /* the stream's marks and counts, or NULL: every entry */
} RingReader;

/* Checks the header of a mapping of size bytes and positions the reader at the head, so that it
 * gets what is published next. -EINVAL: not a ring of this version, or larger than size. */
int ring_reader_init(RingReader *r, const void *mem, size_t size);
void ring_reader_done(RingReader *r);
/* Moves the reader to an entry boundary (the start position a stream's reply gives). */
void ring_reader_seek(RingReader *r, uint64_t pos, uint64_t seq);

/* Reads only what the stream of page selects from now on (page: see below; NULL: everything). With
 * a page, ring_deliver() counts what it delivers and ring_resync() tells what was lost. */
void ring_reader_set_page(RingReader *r, RingPageReader *page);

/* Copies the entries from the reader's position up to the head (or as many as fit its buffer)
 * into private memory. Always 0: any inconsistency is judged by ring_validate(). */
int ring_copy(RingReader *r, const void *mem);
/* Whether the copy is intact: 0, RING_READ_RESYNC if the writer had moved its oldest entry past
 * the copy's start, -EBADMSG if the copy made no sense although nothing was overwritten. */
int ring_validate(RingReader *r, const void *mem);
/* Hands the copied entries to deliver in order and moves past them; a negative return of
 * deliver stops there and is returned. With a page, a LOST entry comes with the stream's share
 * in lost (none: skipped); when that is less than the entry's count, line is NULL and line_len 0:
 * the ring's line is not the stream's, which encodes its own (batch_add_lost()). */
int ring_deliver(RingReader *r, RingDeliverFn deliver, void *userdata);

/* ring_copy(), ring_validate() and ring_deliver(): 0 with *ret_n (may be NULL) entries delivered,
 * RING_READ_RESYNC (nothing delivered), or a negative errno. */
int ring_read(RingReader *r, const void *mem, RingDeliverFn deliver, void *userdata, size_t *ret_n);

/* After RING_READ_RESYNC: moves the reader to the newest publish and returns the number of
 * entries passed over (also added to r->skipped). -EBADMSG if the header (or the page) makes no
 * sense, -EAGAIN if it never held still (the caller tries again later). With a page, also fills
 * page->lost and page->lost_ts with what the stream selected in the gap (ring_page_commit()). */
int64_t ring_resync(RingReader *r, const void *mem);

/* The ring's state (RING_STATE_*), read atomically. */
uint32_t ring_state(const void *mem);

/* ---- the reader page ---- */

#define RING_PAGE_MAGIC "TPDPAGE" /* 8 bytes with its NUL */
#define RING_PAGE_VERSION 1
/* Counts by kind: 0 events, then each TPD_LOST_* cause. */
#define RING_PAGE_KINDS _RECORD_KIND_MAX
/* CPUs a page may have: a reader allocates by it. */
#define RING_PAGE_CPUS_MAX 65536U

/* The page starts with this header, then a RingPageCpu per CPU, then (unless all) the bitmap:
 * one bit per entry seq, modulo n_bits. n_bits is data_size / 32: every entry is at least 40 bytes,
 * so n_bits entries take more than the ring, and a bit is reused only after its entry was
 * overwritten, which the reader's check (ring_validate()) catches, the bit being read with the
 * entry. The fields from gen on change at each publish; gen is a seqcount as the ring's. */
typedef struct RingPageHeader {
        char magic[8];
        uint32_t version;
        uint32_t n_cpus;
        uint32_t n_kinds; /* RING_PAGE_KINDS */
        uint32_t all;     /* 1: the stream selects every entry (a loss by its share): no bitmap */
        uint64_t n_bits;
        uint64_t size; /* header, CPUs and bitmap */
        uint32_t gen;
        uint32_t reserved0;
        uint64_t publish; /* the ring publish the counts are of */
        uint64_t reserved[1];
} RingPageHeader;

/* Of one CPU, counts of the entries the stream selects, by kind: after the newest publish and
 * before it; a loss counts as the stream's share of it (stream_loss_share()). */
typedef struct RingPageCpu {
        uint64_t base[2];  /* the kernel's overrun and dropped counters at the stream's start */
        uint64_t ts_after; /* ts of the newest selected entry */
        uint64_t ts_before;
        uint64_t after[RING_PAGE_KINDS];
        uint64_t before[RING_PAGE_KINDS];
} RingPageCpu;

_Static_assert(sizeof(RingPageHeader) == 64, "reader page header");
_Static_assert(offsetof(RingPageHeader, gen) == 40, "layout");
_Static_assert(offsetof(RingPageHeader, publish) == 48, "layout");
_Static_assert(sizeof(RingPageCpu) == 32 + 16 * RING_PAGE_KINDS, "reader page CPU");

static inline uint64_t ring_page_bits(uint64_t data_size) {
        return data_size / 32;
}

/* The size of the page of a stream on a ring of data_size (all: no bitmap). */
static inline size_t ring_page_size(uint32_t n_cpus, uint64_t data_size, bool all) {
        return sizeof(RingPageHeader) + (size_t) n_cpus * sizeof(RingPageCpu) +
               (all ? 0 : (size_t) (ring_page_bits(data_size) / 8));
}

/* Where a record or entry of cpu is counted: as a stream counts its drops, beyond its CPUs on 0. */
static inline uint32_t ring_page_cpu(uint32_t n_cpus, uint32_t cpu) {
        return cpu < n_cpus ? cpu : 0;
}

/* Where an entry of type and kind is counted: events at 0, a loss by its cause. */
static inline unsigned ring_page_kind(uint8_t type, uint8_t kind) {
        if (type == RING_EVENT)
                return 0;
        return kind > 0 && kind < RING_PAGE_KINDS ? kind : TPD_LOST_CLIENT;
}

#define RING_PAGE_DIRTY_MAX 8

/* The writer's side of one stream's page. */
typedef struct RingPageWriter {
        RingPageHeader *header;
        RingPageCpu *cpus;
        uint8_t *bits;
        uint32_t n_cpus;
        uint64_t n_bits;
        uint64_t data_size;
        bool all;
        /* The CPUs whose before differs from after: the ones the last publish counted. */
        uint32_t dirty[RING_PAGE_DIRTY_MAX];
        unsigned n_dirty;
        bool all_dirty;
} RingPageWriter;

/* Lays out the page of a stream over mem (size bytes, at least ring_page_size(), 8-byte aligned)
 * for a ring of data_size; all: the stream selects every record (no events, pids, CPUs or
 * filter). -EINVAL for another size. */
int ring_page_writer_init(RingPageWriter *pw, void *mem, size_t size, uint32_t n_cpus, uint64_t data_size,
                          bool all);
/* The stream's base (stream_set_base()), before the page is handed to its reader. */
void ring_page_set_base(RingPageWriter *pw, unsigned cpu, uint64_t overrun, uint64_t dropped);
/* Updates the page for one publish of the ring (from the ring's on_publish): c says what the stream
 * takes of batch b (stream_count_batch()), NULL with b for a publish of other items (notices,
 * clock entries), which the page does not count. O(1) for a stream that takes a whole batch
 * without losses in one publish; else in the records it selects. */
void ring_page_publish(RingPageWriter *pw, const RingPublish *p, const Batch *b, const StreamCount *c);

/* The reader's side: the page's fixed fields checked and copied once, its own counts. Arrays by
 * [cpu * RING_PAGE_KINDS + kind]; lost by cause, events lost as TPD_LOST_CLIENT. */
struct RingPageReader {
        const uint8_t *mem;
        uint32_t n_cpus;
        bool all;
        uint64_t n_bits;
        uint64_t *base;    /* [cpu * 2 + (dropped)] */
        uint64_t *got;     /* delivered: events, and losses by their share */
        uint64_t *lost;    /* by the last resync, by cause */
        uint64_t *lost_ts; /* [cpu]: ts to date them */
        uint64_t *before;  /* scratch: the page's counts at a resync */
        uint64_t *ts_before;
};

/* Checks the page of size bytes for a ring of data_size. -EINVAL: no page of this version or
 * larger than size; -ENOMEM. */
int ring_page_reader_init(RingPageReader *pr, const void *mem, size_t size, uint64_t data_size);
void ring_page_reader_done(RingPageReader *pr);
/* Whether the stream selects the entry of seq (an EVENT or LOST entry). */
bool ring_page_selected(const RingPageReader *pr, uint64_t seq);
/* What a selected entry counts for the stream: 1 for an event, a loss's share (0: none of it). */
uint64_t ring_page_share(const RingPageReader *pr, const RingItem *it);
/* Counts a delivered entry (n: ring_page_share()). */
void ring_page_got(RingPageReader *pr, const RingItem *it, uint64_t n);
/* ring_resync()'s: reads the page's counts before the newest publish, which must be publish.
 * 0, or -EAGAIN if the page did not hold still or is of another publish (read the ring's header
 * again). */
int ring_page_read(RingPageReader *pr, uint64_t publish);
/* Then: lost = before - got, by cause, dated ts_before; got = before. -EBADMSG (nothing changed)
 * if the reader got more than the page says there was. */
int ring_page_commit(RingPageReader *pr);

/* The header's gen as a seqcount, also the page's: odd while the fields it covers change. */
static inline void ring_gen_begin(uint32_t *gen) {
        __atomic_store_n(gen, __atomic_load_n(gen, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void ring_gen_end(uint32_t *gen) {
        __atomic_store_n(gen, __atomic_load_n(gen, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
}
