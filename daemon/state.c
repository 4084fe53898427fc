/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "state.h"
#include "util.h"

void state_pins_free(StatePin *pins, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(pins[i].event);
                free(pins[i].filter);
                free(pins[i].uids);
        }
        free(pins);
}

int state_load(const char *path, StatePin **ret, size_t *ret_n) {
        json_object *root, *list;
        StatePin *pins = NULL;
        size_t n = 0, len;

        *ret = NULL;
        *ret_n = 0;
        if (access(path, F_OK) < 0)
                return errno == ENOENT ? 0 : negative_errno();

        root = json_object_from_file(path);
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

                if (!json_object_object_get_ex(o, "event", &ev) || !json_object_is_type(ev, json_type_string))
                        continue;
                pins[n].event = strdup(json_object_get_string(ev));
                if (json_object_object_get_ex(o, "filter", &f) && json_object_is_type(f, json_type_string))
                        pins[n].filter = strdup(json_object_get_string(f));
                if (json_object_object_get_ex(o, "filter_uid", &f) && json_object_is_type(f, json_type_int))
                        pins[n].filter_uid = (uid_t) json_object_get_int64(f);
                /* Files of tpd before pins had owners have no "uids": those pins were root's. */
                if (json_object_object_get_ex(o, "uids", &uids) && json_object_is_type(uids, json_type_array)) {
                        size_t k = json_object_array_length(uids);
                        pins[n].uids = calloc(k + 1, sizeof(uid_t));
                        for (size_t j = 0; pins[n].uids && j < k; j++) {
                                json_object *u = json_object_array_get_idx(uids, j);
                                int64_t v = json_object_get_int64(u);
                                if (json_object_is_type(u, json_type_int) && v >= 0 && v < (int64_t) UINT32_MAX)
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

int state_save(const char *path, const StatePin *pins, size_t n) {
        _cleanup_free_ char *tmp = NULL;
        json_object *root, *list;
        const char *text;
        _cleanup_close_ int fd = -1;
        size_t len;

        if (n == 0)
                return unlink(path) < 0 && errno != ENOENT ? negative_errno() : 0;

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

        text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        len = strlen(text);

        if (asprintf(&tmp, "%s.tmp", path) < 0) {
                json_object_put(root);
                return -ENOMEM;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, text, len) != (ssize_t) len || write(fd, "\n", 1) != 1 || fsync(fd) < 0) {
                int r = negative_errno();
                json_object_put(root);
                (void) unlink(tmp);
                return r;
        }
        json_object_put(root);
        if (rename(tmp, path) < 0) {
                int r = negative_errno();
                (void) unlink(tmp);
                return r;
        }
        return 0;
}
