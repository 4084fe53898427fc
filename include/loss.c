/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <stddef.h>

#include "loss.h"

const char *tpd_lost_cause_name(int cause) {
        static const char *const names[_TPD_LOST_MAX] = {
                [TPD_LOST_OVERRUN] = "overrun", [TPD_LOST_DROPPED] = "dropped", [TPD_LOST_CLIENT] = "client",
                [TPD_LOST_DECODE] = "decode",   [TPD_LOST_UNKNOWN] = "unknown", [TPD_LOST_EXPORT] = "export",
        };

        if (cause <= 0 || cause >= _TPD_LOST_MAX)
                return NULL;
        return names[cause];
}
