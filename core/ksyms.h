/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * The kernel's symbols by address, from the text of /proc/kallsyms, to name the frames of kernel
 * stacks as the kernel itself names them (its %pS): the symbol at or below an address, the first
 * listed of those sharing an address, and its module. Pure code: the caller reads the file.
 */

typedef struct KsymsEntry {
        uint64_t address;
        uint32_t name; /* offset in names: "symbol" or "symbol [module]" */
        uint32_t length;
} KsymsEntry;

/* A frame's text as ksyms_name() made it: the same few hundred return addresses make most stacks. */
#define KSYMS_CACHED_MAX 110U
typedef struct KsymsCached {
        uint64_t address;
        uint8_t length; /* 0: empty */
        char text[KSYMS_CACHED_MAX + 1];
} KsymsCached;
#define KSYMS_CACHE_SIZE 1024U

typedef struct Ksyms {
        KsymsEntry *entries; /* by address; of equal addresses, the first listed */
        size_t n_entries;
        char *names;
        size_t names_size;
        uint64_t text_end;  /* past the last symbol: addresses beyond are unknown */
        KsymsCached *cache; /* KSYMS_CACHE_SIZE, by address; made at the first ksyms_name() */
} Ksyms;

/* Parses the text of /proc/kallsyms. -ENODATA when it holds no address (kptr_restrict hid them
 * all from the reader), -EBADMSG when a line is not one of kallsyms. */
int ksyms_parse(Ksyms *k, const char *text, size_t size);
void ksyms_done(Ksyms *k);

/* Writes "symbol+0xoff" (with " [module]" for a module's) of address into buf (NUL-terminated, cut
 * to size). Returns the length, or 0 when no symbol holds the address. */
size_t ksyms_name(Ksyms *k, uint64_t address, char *buf, size_t size);
