/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "state.h"
#include "util.h"

/* The file lists pins; a larger one was not written by tpd. */
#define STATE_FILE_MAX (16 * 1024 * 1024)

void state_pins_free(StatePin *pins, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(pins[i].event);
                free(pins[i].filter);
                free(pins[i].uids);
        }
        free(pins);
}

/* Opened without following a symlink: the state file is tpd's own, and a link planted in its
 * place must neither be read nor written through. */
int state_load(const char *path, StatePin **ret, size_t *ret_n) {
        _cleanup_close_ int fd = -1;
        json_object *root, *list;
        StatePin *pins = NULL;
        struct stat st;
        size_t n = 0, len;

        *ret = NULL;
        *ret_n = 0;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return errno == ENOENT ? 0 : negative_errno();
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return -EBADFD;
        if (st.st_size > STATE_FILE_MAX)
                return -EFBIG;

        root = json_object_from_fd(fd);
        if (!root)
                return -EBADMSG;
        if (!json_object_object_get_ex(root, "pins", &list) || !json_object_is_type(list, json_type_array)) {
                json_object_put(root);
                return -EBADMSG;
        }

        len = json_object_array_length(list);
        pins = calloc(len + 1, sizeof(StatePin));
        if (!pins) {
                json_object_put(root);
                return -ENOMEM;
        }
        for (size_t i = 0; i < len; i++) {
                json_object *o = json_object_array_get_idx(list, i), *ev, *f, *uids;

                if (!json_object_object_get_ex(o, "event", &ev) ||
                    !json_object_is_type(ev, json_type_string))
                        continue;
                pins[n].event = strdup(json_object_get_string(ev));
                if (json_object_object_get_ex(o, "filter", &f) && json_object_is_type(f, json_type_string))
                        pins[n].filter = strdup(json_object_get_string(f));
                if (json_object_object_get_ex(o, "filter_uid", &f) && json_object_is_type(f, json_type_int))
                        pins[n].filter_uid = (uid_t) json_object_get_int64(f);
                /* Files of tpd before pins had owners have no "uids": those pins were root's. */
                if (json_object_object_get_ex(o, "uids", &uids) &&
                    json_object_is_type(uids, json_type_array)) {
                        size_t k = json_object_array_length(uids);
                        pins[n].uids = calloc(k + 1, sizeof(uid_t));
                        for (size_t j = 0; pins[n].uids && j < k; j++) {
                                json_object *u = json_object_array_get_idx(uids, j);
                                int64_t v = json_object_get_int64(u);
                                if (json_object_is_type(u, json_type_int) && v >= 0 &&
                                    v < (int64_t) UINT32_MAX)
                                        pins[n].uids[pins[n].n_uids++] = (uid_t) v;
                        }
                } else {
                        pins[n].uids = calloc(1, sizeof(uid_t));
                        if (pins[n].uids)
                                pins[n].n_uids = 1;
                }
                if (!pins[n].event || !pins[n].uids) {
                        state_pins_free(pins, n + 1);
                        json_object_put(root);
                        return -ENOMEM;
                }
                n++;
        }
        json_object_put(root);
        *ret = pins;
        *ret_n = n;
        return 0;
}

/* A rename (or unlink) is durable once the directory that holds the name is synced. */
static int fsync_parent(const char *path) {
        _cleanup_free_ char *dir = strdup(path);
        _cleanup_close_ int fd = -1;
        char *slash;

        if (!dir)
                return -ENOMEM;
        slash = strrchr(dir, '/');
        if (!slash)
                strcpy(dir, ".");
        else if (slash == dir)
                dir[1] = 0;
        else
                *slash = 0;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) < 0)
                return negative_errno();
        return 0;
}

int state_save(const char *path, const StatePin *pins, size_t n) {
        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = -1;
        json_object *root, *list;
        const char *text;
        int r;

        if (n == 0) {
                if (unlink(path) < 0)
                        return errno == ENOENT ? 0 : negative_errno();
                return fsync_parent(path);
        }

        root = json_object_new_object();
        list = json_object_new_array();
        if (!root || !list) {
                json_object_put(root);
                json_object_put(list);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                json_object *o = json_object_new_object();
                json_object *uids = json_object_new_array();

                json_object_object_add(o, "event", json_object_new_string(pins[i].event));
                if (pins[i].filter) {
                        json_object_object_add(o, "filter", json_object_new_string(pins[i].filter));
                        json_object_object_add(o, "filter_uid", json_object_new_int64(pins[i].filter_uid));
                }
                for (size_t j = 0; j < pins[i].n_uids; j++)
                        json_object_array_add(uids, json_object_new_int64(pins[i].uids[j]));
                json_object_object_add(o, "uids", uids);
                json_object_array_add(list, o);
        }
        json_object_object_add(root, "version", json_object_new_int(1));
        json_object_object_add(root, "pins", list);
        text = json_object_to_json_string_ext(root,
                                              JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);

        if (asprintf(&tmp, "%s.tmp", path) < 0) {
                json_object_put(root);
                return -ENOMEM;
        }
        /* A leftover of a crash, or anything planted there: created afresh, never written through. */
        (void) unlink(tmp);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
                json_object_put(root);
                return negative_errno();
        }
        r = write_all(fd, text, strlen(text));
        json_object_put(root);
        if (r >= 0)
                r = write_all(fd, "\n", 1);
        /* Data before name: after a crash the file is the old one or the complete new one. */
        if (r >= 0 && fsync(fd) < 0)
                r = negative_errno();
        if (close(TAKE_FD(fd)) < 0 && r >= 0)
                r = negative_errno();
        if (r >= 0 && rename(tmp, path) < 0)
                r = negative_errno();
        if (r < 0) {
                (void) unlink(tmp);
                return r;
        }
        return fsync_parent(path);
}
