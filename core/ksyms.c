/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ksyms.h"
#include "util.h"

void ksyms_done(Ksyms *k) {
        free(k->entries);
        free(k->names);
        free(k->cache);
        *k = (Ksyms){};
}

static int cmp_entry(const void *x, const void *y) {
        const KsymsEntry *a = x, *b = y;

        if (a->address != b->address)
                return a->address < b->address ? -1 : 1;
        /* Names are stored in the order listed: the first listed first, as the kernel picks it. */
        return a->name < b->name ? -1 : a->name > b->name;
}

/* One line: "ffffffff81000000 T _stext" or "… t name\t[module]". */
static int parse_line(Ksyms *k, const char *line, size_t n, size_t *names_used) {
        const char *p = line, *end = line + n, *name;
        char *e;
        uint64_t address;
        size_t len;

        errno = 0;
        address = strtoull(p, &e, 16);
        if (errno != 0 || e == p || e + 3 > end || e[0] != ' ' || e[2] != ' ')
                return -EBADMSG;
        name = e + 3;
        len = (size_t) (end - name);
        if (len == 0)
                return -EBADMSG;
        if (k->n_entries % 4096 == 0) {
                KsymsEntry *entries = reallocarray(k->entries, k->n_entries + 4096, sizeof(KsymsEntry));
                if (!entries)
                        return -ENOMEM;
                k->entries = entries;
        }
        k->entries[k->n_entries++] =
                (KsymsEntry){ .address = address, .name = (uint32_t) *names_used, .length = (uint32_t) len };
        /* "name\t[module]" is kept as "name [module]". */
        memcpy(k->names + *names_used, name, len);
        for (size_t i = 0; i < len; i++)
                if (k->names[*names_used + i] == '\t')
                        k->names[*names_used + i] = ' ';
        *names_used += len;
        return address != 0;
}

int ksyms_parse(Ksyms *k, const char *text, size_t size) {
        size_t used = 0, nonzero = 0;
        int r;

        *k = (Ksyms){};
        if (size >= UINT32_MAX)
                return -EFBIG;
        /* The names take less room than the text they come from. */
        k->names = malloc(size + 1);
        if (!k->names)
                return -ENOMEM;
        for (size_t i = 0; i < size;) {
                const char *nl = memchr(text + i, '\n', size - i);
                size_t n = nl ? (size_t) (nl - (text + i)) : size - i;

                if (n > 0) {
                        r = parse_line(k, text + i, n, &used);
                        if (r < 0) {
                                ksyms_done(k);
                                return r;
                        }
                        nonzero += (size_t) r;
                }
                i += n + 1;
        }
        k->names_size = used;
        if (nonzero == 0) {
                ksyms_done(k);
                return -ENODATA;
        }
        qsort(k->entries, k->n_entries, sizeof(KsymsEntry), cmp_entry);
        k->text_end = k->entries[k->n_entries - 1].address + 0x100000;
        return 0;
}

static size_t ksyms_lookup(const Ksyms *k, uint64_t address, char *buf, size_t size) {
        size_t lo = 0, hi = k->n_entries;
        const KsymsEntry *e;
        const char *module;
        int n;

        if (k->n_entries == 0 || address < k->entries[0].address || address >= k->text_end)
                return 0;
        /* The last entry at or below address, then the first of its address. */
        while (hi - lo > 1) {
                size_t mid = lo + (hi - lo) / 2;

                if (k->entries[mid].address <= address)
                        lo = mid;
                else
                        hi = mid;
        }
        while (lo > 0 && k->entries[lo - 1].address == k->entries[lo].address)
                lo--;
        e = &k->entries[lo];
        module = memchr(k->names + e->name, ' ', e->length);
        if (module)
                n = snprintf(buf, size, "%.*s+0x%" PRIx64 "%.*s", (int) (module - (k->names + e->name)),
                             k->names + e->name, address - e->address,
                             (int) (e->length - (size_t) (module - (k->names + e->name))), module);
        else
                n = snprintf(buf, size, "%.*s+0x%" PRIx64, (int) e->length, k->names + e->name,
                             address - e->address);
        return n < 0 ? 0 : MIN((size_t) n, size - 1);
}

size_t ksyms_name(Ksyms *k, uint64_t address, char *buf, size_t size) {
        KsymsCached *c;
        size_t n;

        if (size == 0)
                return 0;
        if (!k->cache)
                k->cache = calloc(KSYMS_CACHE_SIZE, sizeof(KsymsCached));
        c = k->cache ? &k->cache[(address >> 2) % KSYMS_CACHE_SIZE] : NULL;
        if (c && c->length > 0 && c->address == address) {
                n = MIN((size_t) c->length, size - 1);
                memcpy(buf, c->text, n);
                buf[n] = '\0';
                return n;
        }
        n = ksyms_lookup(k, address, buf, size);
        /* Only whole names are kept. */
        if (c && n > 0 && n <= KSYMS_CACHED_MAX && n + 1 < size) {
                c->address = address;
                c->length = (uint8_t) n;
                memcpy(c->text, buf, n + 1);
        }
        return n;
}
