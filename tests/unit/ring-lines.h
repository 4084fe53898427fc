/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The ring tests' lines: the length and bytes of entry seq's line follow from seq alone, so that a
 * reader can check what it got without the writer's help. */

#include <stdint.h>

static inline uint32_t ring_test_line_len(uint64_t seq, uint32_t max) {
        return 1 + (uint32_t) ((seq * 2654435761u) % max);
}

static inline void ring_test_line(uint64_t seq, char *buf, uint32_t len) {
        for (uint32_t i = 0; i < len; i++)
                buf[i] = (char) ('a' + (seq + i) % 26);
        buf[len - 1] = '\n';
}
