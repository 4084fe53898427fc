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

typedef struct Ksyms {
        KsymsEntry *entries; /* by address; of equal addresses, the first listed */
        size_t n_entries;
        char *names;
        size_t names_size;
        uint64_t text_end; /* past the last symbol: addresses beyond are unknown */
} Ksyms;

/* Parses the text of /proc/kallsyms. -ENODATA when it holds no address (kptr_restrict hid them
 * all from the reader), -EBADMSG when a line is not one of kallsyms. */
int ksyms_parse(Ksyms *k, const char *text, size_t size);
void ksyms_done(Ksyms *k);

/* Writes "symbol+0xoff" (with " [module]" for a module's) of address into buf (NUL-terminated, cut
 * to size). Returns the length, or 0 when no symbol holds the address. */
size_t ksyms_name(const Ksyms *k, uint64_t address, char *buf, size_t size);
