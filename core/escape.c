/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <string.h>

#include "core/escape.h"

const char *escape_text(const char *s, char *buf, size_t size) {
        static const char hex[] = "0123456789abcdef";
        size_t n = 0;

        if (size < 8)
                abort();
        if (!s)
                s = "(null)";
        for (; *s; s++) {
                unsigned char c = (unsigned char) *s;
                char e[4];
                size_t k;

                if (c == '\\' || c == '\'' || c == '"') {
                        e[0] = '\\';
                        e[1] = (char) c;
                        k = 2;
                } else if (c < 0x20 || c >= 0x7f) {
                        e[0] = '\\';
                        e[1] = 'x';
                        e[2] = hex[c >> 4];
                        e[3] = hex[c & 15];
                        k = 4;
                } else {
                        e[0] = (char) c;
                        k = 1;
                }
                /* Keep room for "..." and the NUL. */
                if (n + k + 4 > size) {
                        memcpy(buf + n, "...", 3);
                        n += 3;
                        break;
                }
                memcpy(buf + n, e, k);
                n += k;
        }
        buf[n] = 0;
        return buf;
}
