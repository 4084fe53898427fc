/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <sys/types.h>

/*
 * Persisted pins: the events enabled with Enable and their kernel filters, saved as JSON under the
 * state directory (one file per instance name, so that instances never share state) and restored
 * at start. Written atomically and durably (file synced, renamed, directory synced), so a crash
 * leaves the old file or the new one, never a mix. Neither call follows a symlink at the path.
 */

typedef struct StatePin {
        char *event;
        char *filter; /* NULL when none */
        uid_t filter_uid;
        uid_t *uids; /* who pinned it; a file without "uids" (older tpd) loads as root's pin */
        size_t n_uids;
} StatePin;

void state_pins_free(StatePin *pins, size_t n);

/* Loads the pins; a missing file is no pins. -EBADMSG for a file that does not parse, -ELOOP for a
 * symlink, -EBADFD for anything but a regular file. */
int state_load(const char *path, StatePin **ret, size_t *ret_n);
/* Saves the pins; with none, removes the file. */
int state_save(const char *path, const StatePin *pins, size_t n);
