/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

typedef struct Manager Manager;
typedef struct Server Server;

/*
 * The listening socket: bound here or passed in by systemd, accepting connections and checking
 * the peer's credentials (root, or a member of the access group) before they become clients.
 */

/* Listens on fd when >= 0 (socket activation), else binds path (mode 0660, parent created). */
int server_new(Manager *m, int fd, const char *path, Server **ret);
Server *server_free(Server *s);
