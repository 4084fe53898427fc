/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Sub-buffer pages as the kernel's ring buffer hands them out through trace_pipe_raw, and as
 * trace-cmd stores them: a header (u64 time stamp, then the commit word: data length and loss
 * flags, as events/header_page describes it on a 64-bit kernel), then entries, each a 32-bit
 * header (type_len:5, time_delta:27) and its payload. Pure code: every length is checked against
 * the page, so a corrupt page ends in -EBADMSG, never in a read past it or in an endless loop.
 */

#define PAGE_HEADER_SIZE 16U
#define PAGE_COMMIT_MASK ((1ULL << 27) - 1)
#define PAGE_MISSED_STORED (1ULL << 30)
#define PAGE_MISSED_EVENTS (1ULL << 31)
/* The largest delta an entry header holds (27 bits); a longer one takes a time extend entry. */
#define PAGE_DELTA_MAX ((1U << 27) - 1)

typedef struct PageWalk {
        const uint8_t *data;
        const uint8_t *end;
        uint64_t page_ts;
        uint64_t commit;
        uint64_t ts; /* of the last entry walked */
} PageWalk;

/* One data record of a page. */
typedef struct PageEntry {
        const uint8_t *entry; /* its header */
        const uint8_t *payload;
        size_t size; /* payload bytes, as the entry states them */
        size_t span; /* bytes from the header to the next entry */
        uint64_t ts;
} PageEntry;

/* Checks the page's header: -EBADMSG when its data (and stored loss count) do not fit in size. */
int page_walk_init(PageWalk *w, const void *page, size_t size);
/* The next data record: 1 with *e filled, 0 at the end of the data, -EBADMSG at an entry that
 * does not fit. Time extends and stamps move the time; padding and discarded entries are skipped
 * (like the kernel's own reader, a discarded entry's delta does not move the time). */
int page_walk_next(PageWalk *w, PageEntry *e);

/* Whether the page says events were lost before it; *ret_count gets the count it stores, or
 * UINT64_MAX when it had no room for one. */
bool page_missed(const PageWalk *w, uint64_t *ret_count);

/* Calls fn (if not NULL) for each data record of a page, walking its entry headers up to the
 * first entry that does not fit (a commit word longer than the page walks the page). Returns the
 * number of records walked. */
uint64_t page_for_each(const void *page, size_t size, void (*fn)(void *userdata, const PageEntry *e),
                       void *userdata);
/* The number of data records of a page, by page_for_each(). */
uint64_t page_records(const void *page, size_t size);

/* Decides whether a record stays in a filtered page. */
typedef bool (*PageKeep)(void *userdata, const PageEntry *e);

/*
 * Writes to out (size bytes, not overlapping page) the page with only the records keep() accepts,
 * in order and with their time stamps: the deltas of dropped records move to the next record kept
 * (with a time extend entry where the sum no longer fits in 27 bits), and the page's loss flags
 * and count stay. The rest of out is zeroed. Returns the number of records kept, or -EBADMSG (out
 * then holds what was kept before the fault, still a valid page). *ret_walked, if set, gets the
 * number of data records walked.
 */
int page_filter(const void *page, size_t size, PageKeep keep, void *userdata, void *out,
                uint64_t *ret_walked);

/* Takes the loss flags off a page: its records were split in two, and the first part says it. */
void page_clear_missed(void *page, size_t size);

/* Adds a loss before a page (written by page_filter() or the kernel): count events, or an unknown
 * number with UINT64_MAX. The count is stored when the page has room for it and every loss it
 * adds to is known; otherwise only the flag says that events were lost, as the kernel does. */
void page_add_missed(void *page, size_t size, uint64_t count);

/* A page written record by record (tpctl convert): from a time stamp, each entry with its delta to
 * the last one, a time extend before a delta that does not fit in 27 bits. 8 bytes stay free after
 * the data for a loss count (page_add_missed()), unless the first entry needs them. */
typedef struct PageBuild {
        uint8_t *page;
        size_t size;
        uint8_t *at; /* where the next entry goes */
        uint64_t ts; /* of the last entry, the page's at first */
        uint32_t records;
} PageBuild;

/* Starts page (size bytes, zeroed here) at time ts. */
void page_build_init(PageBuild *b, void *page, size_t size, uint64_t ts);
/* Appends a data entry of len bytes at time ts: 0, -ERANGE when ts is before the last entry's,
 * -ENOSPC when the page has no room for it or ts is 2^59 ns or more after the last entry's, -E2BIG
 * when an empty page would have no room either. */
int page_build_add(PageBuild *b, uint64_t ts, const void *data, size_t len);
