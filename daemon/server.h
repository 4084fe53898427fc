/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <systemd/sd-event.h>

typedef struct Server Server;

/*
 * The listening socket: bound here or passed in by systemd. It accepts connections and reads the
 * peer's credentials and groups as the kernel recorded them at connect() (SO_PEERCRED,
 * SO_PEERGROUPS; no user database), and hands both up: whether the peer may stay is the owner's
 * decision. Running out of file descriptors pauses accepting instead of spinning.
 */

/* Takes fd over. groups is empty for root, whose groups do not matter. */
typedef void (*ServerAcceptHandler)(int fd, const struct ucred *cred, const gid_t *groups, size_t n_groups,
                                    void *userdata);

/* Listens on fd when >= 0 (socket activation), else binds path: mode 0660, group gid (none when
 * (gid_t) -1), parent directory created. */
int server_new(sd_event *event, int fd, const char *path, gid_t gid, ServerAcceptHandler on_accept,
               void *userdata, Server **ret);
Server *server_free(Server *s);
