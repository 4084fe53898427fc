/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "varlink.h"

void varlink_buffer_init(VarlinkBuffer *b, size_t max) {
        *b = (VarlinkBuffer){ .max = max };
}

void varlink_buffer_done(VarlinkBuffer *b) {
        free(b->data);
        *b = (VarlinkBuffer){};
}

int varlink_buffer_space(VarlinkBuffer *b, size_t n, char **ret) {
        /* Drop what was handed out before growing. */
        if (b->consumed > 0) {
                memmove(b->data, b->data + b->consumed, b->len - b->consumed);
                b->len -= b->consumed;
                b->consumed = 0;
        }
        if (b->cap - b->len < n) {
                size_t cap = MAX(b->cap * 2, b->len + n);
                char *p = realloc(b->data, cap);
                if (!p)
                        return -ENOMEM;
                b->data = p;
                b->cap = cap;
        }
        *ret = b->data + b->len;
        return 0;
}

void varlink_buffer_advance(VarlinkBuffer *b, size_t n) {
        b->len += n;
}

int varlink_buffer_next(VarlinkBuffer *b, const char **ret, size_t *ret_len) {
        size_t avail = b->len - b->consumed;
        char *start = b->data + b->consumed;
        char *nul = avail > 0 ? memchr(start, 0, avail) : NULL;

        if (!nul)
                return avail > b->max ? -EMSGSIZE : 0;
        if ((size_t) (nul - start) > b->max)
                return -EMSGSIZE;

        *ret = start;
        *ret_len = (size_t) (nul - start);
        b->consumed += *ret_len + 1;
        return 1;
}

size_t varlink_buffer_pending(const VarlinkBuffer *b) {
        return b->len - b->consumed;
}

int varlink_json_parse(const char *text, size_t len, json_object **ret) {
        json_tokener *tok;
        json_object *o;

        tok = json_tokener_new();
        if (!tok)
                return -ENOMEM;
        /* Only JSON: json-c otherwise takes trailing commas, single quotes and NaN. */
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        o = json_tokener_parse_ex(tok, text, (int) len);
        /* Anything after the value (other than nothing) is malformed. */
        if (o && json_tokener_get_parse_end(tok) != len) {
                json_object_put(o);
                o = NULL;
        }
        json_tokener_free(tok);
        if (!o)
                return -EBADMSG;
        *ret = o;
        return 0;
}

int varlink_call_parse(const char *msg, size_t len, VarlinkCall *ret) {
        json_object *o = NULL, *v;
        VarlinkCall call = {};

        if (varlink_json_parse(msg, len, &o) < 0)
                goto bad;
        if (!o || !json_object_is_type(o, json_type_object))
                goto bad;
        call.object = o;

        if (!json_object_object_get_ex(o, "method", &v) || !json_object_is_type(v, json_type_string))
                goto bad;
        call.method = json_object_get_string(v);

        if (json_object_object_get_ex(o, "parameters", &v) && !json_object_is_type(v, json_type_null)) {
                if (!json_object_is_type(v, json_type_object))
                        goto bad;
                call.parameters = json_object_get(v);
        } else
                call.parameters = json_object_new_object();
        if (!call.parameters)
                goto bad;

        static const char *const flags[] = { "more", "oneway", "upgrade" };
        bool *dest[] = { &call.more, &call.oneway, &call.upgrade };
        for (size_t i = 0; i < ELEMENTSOF(flags); i++)
                if (json_object_object_get_ex(o, flags[i], &v) && !json_object_is_type(v, json_type_null)) {
                        if (!json_object_is_type(v, json_type_boolean))
                                goto bad;
                        *dest[i] = json_object_get_boolean(v);
                }

        *ret = call;
        return 0;

bad:
        /* call.object, once set, owns o. */
        if (call.object)
                varlink_call_done(&call);
        else
                json_object_put(o);
        return -EBADMSG;
}

void varlink_call_done(VarlinkCall *call) {
        json_object_put(call->parameters);
        json_object_put(call->object);
        *call = (VarlinkCall){};
}

int json_add(json_object *o, const char *key, json_object *v) {
        if (!v)
                return -ENOMEM;
        if (json_object_object_add(o, key, v) < 0) {
                json_object_put(v);
                return -ENOMEM;
        }
        return 0;
}

static int serialize(json_object *o, char **ret, size_t *ret_len) {
        const char *s;
        size_t n;
        char *p;

        s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                              &n);
        if (!s)
                return -ENOMEM;
        p = malloc(n + 1);
        if (!p)
                return -ENOMEM;
        memcpy(p, s, n);
        p[n] = 0;
        *ret = p;
        *ret_len = n + 1;
        return 0;
}

int varlink_reply_parse(const char *msg, size_t len, VarlinkReply *ret) {
        json_object *o = NULL, *v;
        VarlinkReply reply = {};
        int r;

        r = varlink_json_parse(msg, len, &o);
        if (r < 0)
                return r;
        if (!json_object_is_type(o, json_type_object))
                goto bad;
        if (json_object_object_get_ex(o, "error", &v) && !json_object_is_type(v, json_type_null)) {
                if (!json_object_is_type(v, json_type_string))
                        goto bad;
                reply.error = json_object_get_string(v);
        }
        if (json_object_object_get_ex(o, "continues", &v) && !json_object_is_type(v, json_type_null)) {
                if (!json_object_is_type(v, json_type_boolean))
                        goto bad;
                reply.continues = json_object_get_boolean(v);
        }
        /* Varlink allows leaving out empty parameters; callers always find an object. */
        if (json_object_object_get_ex(o, "parameters", &v) && !json_object_is_type(v, json_type_null)) {
                if (!json_object_is_type(v, json_type_object))
                        goto bad;
                reply.parameters = json_object_get(v);
        } else if (!(reply.parameters = json_object_new_object())) {
                json_object_put(o);
                return -ENOMEM;
        }
        reply.object = o;
        *ret = reply;
        return 0;

bad:
        json_object_put(o);
        return -EBADMSG;
}

void varlink_reply_done(VarlinkReply *reply) {
        json_object_put(reply->parameters);
        json_object_put(reply->object);
        *reply = (VarlinkReply){};
}

int varlink_call_format(const char *method, json_object *parameters, bool upgrade, bool more, char **ret,
                        size_t *ret_len) {
        json_object *o = json_object_new_object();
        int r = o ? json_add(o, "method", json_object_new_string(method)) : -ENOMEM;

        if (r < 0) {
                json_object_put(parameters);
                json_object_put(o);
                return r;
        }
        /* json_add() takes parameters over, also when it fails. */
        r = json_add(o, "parameters", parameters ?: json_object_new_object());
        if (r >= 0 && upgrade)
                r = json_add(o, "upgrade", json_object_new_boolean(true));
        if (r >= 0 && more)
                r = json_add(o, "more", json_object_new_boolean(true));
        if (r >= 0)
                r = serialize(o, ret, ret_len);
        json_object_put(o);
        return r;
}

int varlink_reply(json_object *parameters, bool continues, char **ret, size_t *ret_len) {
        json_object *o = json_object_new_object();
        int r;

        if (!o) {
                json_object_put(parameters);
                return -ENOMEM;
        }
        json_object_object_add(o, "parameters", parameters ?: json_object_new_object());
        if (continues)
                json_object_object_add(o, "continues", json_object_new_boolean(true));
        r = serialize(o, ret, ret_len);
        json_object_put(o);
        return r;
}

int varlink_error(const char *error, json_object *parameters, char **ret, size_t *ret_len) {
        json_object *o = json_object_new_object();
        int r;

        if (!o) {
                json_object_put(parameters);
                return -ENOMEM;
        }
        json_object_object_add(o, "error", json_object_new_string(error));
        json_object_object_add(o, "parameters", parameters ?: json_object_new_object());
        r = serialize(o, ret, ret_len);
        json_object_put(o);
        return r;
}

static json_object *param_get(json_object *params, const char *key) {
        json_object *v;
        if (!json_object_object_get_ex(params, key, &v) || json_object_is_type(v, json_type_null))
                return NULL;
        return v;
}

int varlink_param_string(json_object *params, const char *key, bool optional, const char **ret) {
        json_object *v = param_get(params, key);

        if (!v) {
                *ret = NULL;
                return optional ? 0 : -EINVAL;
        }
        if (!json_object_is_type(v, json_type_string))
                return -EINVAL;
        *ret = json_object_get_string(v);
        /* Embedded NULs would make the C string differ from what the client sent. */
        if (strlen(*ret) != (size_t) json_object_get_string_len(v))
                return -EINVAL;
        return 0;
}

int varlink_param_bool(json_object *params, const char *key, bool *ret) {
        json_object *v = param_get(params, key);

        if (!v) {
                *ret = false;
                return 0;
        }
        if (!json_object_is_type(v, json_type_boolean))
                return -EINVAL;
        *ret = json_object_get_boolean(v);
        return 0;
}

/* The array under key, for the getters below: 0 with *ret NULL when absent, or its length. */
static int param_array(json_object *params, const char *key, size_t max, json_object **ret, size_t *ret_n) {
        json_object *v = param_get(params, key);

        *ret = NULL;
        *ret_n = 0;
        if (!v)
                return 0;
        if (!json_object_is_type(v, json_type_array))
                return -EINVAL;
        *ret_n = json_object_array_length(v);
        if (*ret_n > max)
                return -E2BIG;
        *ret = v;
        return 0;
}

int varlink_param_strv(json_object *params, const char *key, size_t max, char ***ret, size_t *ret_n) {
        json_object *v;
        char **l;
        size_t n;
        int r;

        *ret = NULL;
        *ret_n = 0;
        r = param_array(params, key, max, &v, &n);
        if (r < 0 || !v)
                return r;
        l = calloc(n + 1, sizeof(char *));
        if (!l)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(v, i);
                if (!json_object_is_type(e, json_type_string) ||
                    strlen(json_object_get_string(e)) != (size_t) json_object_get_string_len(e)) {
                        free(l);
                        return -EINVAL;
                }
                l[i] = (char *) json_object_get_string(e);
        }
        *ret = l;
        *ret_n = n;
        return 0;
}

int varlink_param_intv(json_object *params, const char *key, size_t max, int64_t **ret, size_t *ret_n) {
        json_object *v;
        int64_t *l;
        size_t n;
        int r;

        *ret = NULL;
        *ret_n = 0;
        r = param_array(params, key, max, &v, &n);
        if (r < 0 || !v)
                return r;
        l = calloc(n + 1, sizeof(int64_t));
        if (!l)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(v, i);
                if (!json_object_is_type(e, json_type_int)) {
                        free(l);
                        return -EINVAL;
                }
                l[i] = json_object_get_int64(e);
        }
        *ret = l;
        *ret_n = n;
        return 0;
}

int varlink_params_check_keys(json_object *params, const char *const *allowed, const char **ret_bad) {
        json_object_object_foreach(params, key, val) {
                bool ok = false;
                (void) val;
                for (const char *const *a = allowed; *a; a++)
                        if (streq(*a, key)) {
                                ok = true;
                                break;
                        }
                if (!ok) {
                        *ret_bad = key;
                        return -E2BIG;
                }
        }
        return 0;
}
