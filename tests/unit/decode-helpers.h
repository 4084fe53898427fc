/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * What test-decode and test-decode-hostile share: a recorded dataset of tests/data loaded as the
 * daemon would see it, pages copied to end at an inaccessible page, and the checks of the lines a
 * decoder appends.
 */

#include <limits.h>

#include <traceevent/event-parse.h>

#include "core/decode.h"
#include "core/encode.h"
#include "tpd-test.h"

#define PAGE 4096U
#define MAX_CPUS 8
#define MAX_COMMS 16

/* The ring buffer's entry types (include/linux/ring_buffer.h). */
#define TYPE_PADDING 29U
#define TYPE_TIME_EXTEND 30U
#define COMMIT_MISSED (1ULL << 31)
#define COMMIT_STORED (1ULL << 30)

typedef struct Dataset {
        char dir[PATH_MAX];
        struct tep_handle *tep;
        struct {
                int pid;
                char name[32];
        } comms[MAX_COMMS];
        unsigned n_comms;
        uint64_t overrun[MAX_CPUS]; /* from stats.txt */
        uint8_t *pages[MAX_CPUS];   /* cpuN.pages, NULL when that CPU had nothing */
        size_t n_pages[MAX_CPUS];
} Dataset;

/* A tep handle as the daemon makes one, from DIR's header_page and (if formats) its *.format. */
struct tep_handle *tep_from_dir(const char *dir, bool formats);

/* Loads DATADIR/NAME: formats, comms, the overrun of stats.txt and the pages of each CPU. */
void dataset_load(Dataset *ds, const char *datadir, const char *name);
void dataset_done(Dataset *ds);
/* A decoder with the dataset's comms and, if with_missed, its recorded overrun as "missed". */
Decoder *dataset_decoder(Dataset *ds, bool with_missed);

/* Integers of 2, 4 and 8 bytes at p, in the machine's byte order, as a record holds them. */
void put16(uint8_t *p, uint16_t v);
void put32(uint8_t *p, uint32_t v);
void put64(uint8_t *p, uint64_t v);

uint8_t *page_dup(const uint8_t *page, size_t size);
void page_free(uint8_t *p, size_t size);
uint64_t page_commit(const uint8_t *page);
void page_set_commit(uint8_t *page, uint64_t c);

/* Appends the lines of b's records from index from on to out, NUL-terminated. */
void append_records(JsonBuf *out, const Batch *b, size_t from);
void check_json_lines(const char *text, size_t len);
char *golden_lines(const char *dir, size_t from, size_t to, size_t *ret_len);
void check_missed(Decoder *d, Dataset *ds, uint64_t commit_flags, const uint64_t *stored, uint64_t count);
